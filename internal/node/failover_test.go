package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/internal/etcdserver"
)

// TestProducerMovesWhenItsNodeCloses runs three nodes on one etcd (ledgers
// and the commit ledger W=3/A=2): one with every role, two with ingest and
// reader. A client dialled with all three addresses pipelines through a
// producer; the producer's node is closed mid-stream. The producer resends
// its unacknowledged frames with the same (id, epoch, seq) on the next
// node, which takes it over. Every acknowledged seq is then read back
// exactly once, at its acknowledged offset, in producer order.
//
// The closed node is not the sequencer leader, and every node writes once
// before it, so the two left serve from ledgers already open: a node that
// needs a new ledger with one store of three gone waits for degraded
// ensembles (issue 15), which this test is not about.
func TestProducerMovesWhenItsNodeCloses(t *testing.T) {
	etcd, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	leader := startClusterNode(t, etcd, Roles{}, ingest.AckQuorum)
	defer leader.Close()
	victim := startClusterNode(t, etcd, Roles{Ingest: true, Reader: true}, ingest.AckQuorum)
	closeVictim := sync.OnceFunc(victim.Close)
	defer closeVictim()
	survivor := startClusterNode(t, etcd, Roles{Ingest: true, Reader: true}, ingest.AckQuorum)
	defer survivor.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitAllReady(t, ctx, leader, victim, survivor)
	for i, s := range []*Server{leader, victim, survivor} {
		p, err := dial(t, s).NewProducer(ctx, fmt.Sprintf("warm-%d", i), client.ProducerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Produce(ctx, msg("t", "", "warm")); err != nil {
			t.Fatal(err)
		}
		p.Close()
	}

	c, err := client.Dial(strings.Join([]string{victim.GRPCAddr(), survivor.GRPCAddr(), leader.GRPCAddr()}, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(ctx, "mover", client.ProducerOptions{MaxInFlight: 8, RetryBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Endpoint() != victim.GRPCAddr() {
		t.Fatalf("producer started at %s, want the first endpoint %s", p.Endpoint(), victim.GRPCAddr())
	}
	history := produceAcrossClose(t, ctx, p, 100, closeVictim)
	if p.Endpoint() == victim.GRPCAddr() {
		t.Fatalf("producer still at the closed node %s", victim.GRPCAddr())
	}
	t.Logf("%d frames in flight when the producer's node began to close; the close took %v; "+
		"the first frame sent after it was acknowledged %v after the close began (producer now at %s)",
		history.inFlight, history.closeTook, history.moveTook, p.Endpoint())
	if history.moveTook > 20*time.Second {
		t.Fatalf("no ack for %v after the producer's node closed", history.moveTook)
	}
	checkReadBack(t, ctx, c, history.offsets)
}

// ackHistory is what produceAcrossClose recorded: the offset of every
// acknowledged seq, and how long the move took.
type ackHistory struct {
	offsets   map[uint64]uint64 // seq → acknowledged offset
	inFlight  int               // frames sent and not yet acknowledged when the close began
	closeTook time.Duration     // closeNode's own duration
	// moveTook runs from the start of closeNode to the ack of the first
	// frame sent after closeNode returned.
	moveTook time.Duration
}

// sentFrame is a frame and when Send returned it.
type sentFrame struct {
	pending *client.Pending
	at      time.Time
}

// produceAcrossClose pipelines frames of one message ("seq-N") through p
// without pause, calls closeNode once half of them are acknowledged (the
// frames in flight then are resent elsewhere), and waits for the rest.
func produceAcrossClose(t *testing.T, ctx context.Context, p *client.Producer, frames int, closeNode func()) ackHistory {
	t.Helper()
	history := ackHistory{offsets: make(map[uint64]uint64)}
	sent := make(chan sentFrame, frames)
	sendErr := make(chan error, 1)
	var sentCount atomic.Int64
	go func() {
		defer close(sent)
		for i := 0; i < frames; i++ {
			pending, err := p.Send(ctx, msg("t", "", fmt.Sprintf("seq-%d", p.NextSeq())))
			if err != nil {
				sendErr <- err
				return
			}
			sentCount.Add(1)
			sent <- sentFrame{pending, time.Now()}
		}
	}()
	var closeStart, closeEnd time.Time
	for i := 0; i < frames; i++ {
		frame, ok := <-sent
		if !ok {
			t.Fatalf("send: %v", <-sendErr)
		}
		acks, err := frame.pending.Wait(ctx)
		if err != nil {
			t.Fatalf("seq %d: %v", frame.pending.FirstSeq(), err)
		}
		if acks[0].DuplicateWithoutOffset {
			t.Fatalf("seq %d acknowledged without its offset", frame.pending.FirstSeq())
		}
		history.offsets[frame.pending.FirstSeq()] = acks[0].Offset
		switch {
		case i == frames/2-1:
			closeStart = time.Now()
			history.inFlight = int(sentCount.Load()) - (i + 1)
			closeNode()
			closeEnd = time.Now()
			history.closeTook = closeEnd.Sub(closeStart)
		case !closeEnd.IsZero() && history.moveTook == 0 && frame.at.After(closeEnd):
			history.moveTook = time.Since(closeStart)
		}
	}
	if history.moveTook == 0 {
		t.Fatalf("every frame was sent before the close ended: nothing measured the move")
	}
	return history
}

// checkReadBack reads the whole log and checks that every acknowledged
// seq is there once, at its acknowledged offset, in seq order.
func checkReadBack(t *testing.T, ctx context.Context, c *client.Client, offsets map[uint64]uint64) {
	t.Helper()
	var last uint64
	for _, offset := range offsets {
		last = max(last, offset)
	}
	if err := c.WaitCommitted(ctx, last+1); err != nil {
		t.Fatal(err)
	}
	seen := make(map[string][]uint64) // value → offsets
	err := c.Read(ctx, 0, 0, func(page *client.Page) error {
		for _, m := range page.Messages {
			seen[string(m.Message.Value)] = append(seen[string(m.Message.Value)], m.Offset)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	seqs := make([]uint64, 0, len(offsets))
	for seq := range offsets {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	var previous uint64
	for i, seq := range seqs {
		value := fmt.Sprintf("seq-%d", seq)
		if got := seen[value]; len(got) != 1 || got[0] != offsets[seq] {
			t.Fatalf("%s acknowledged at offset %d, logged at %v", value, offsets[seq], got)
		}
		if i > 0 && offsets[seq] <= previous {
			t.Fatalf("%s at offset %d, not after the seq before it (%d)", value, offsets[seq], previous)
		}
		previous = offsets[seq]
	}
	if len(seqs) != int(seqs[len(seqs)-1]-seqs[0]+1) {
		t.Fatalf("acknowledged seqs %d..%d are not all there: %d", seqs[0], seqs[len(seqs)-1], len(seqs))
	}
}

// TestStatusListsTheNodes: Admin/Status names every node with the ingest
// role, so a client dialled with one address learns the others.
func TestStatusListsTheNodes(t *testing.T) {
	etcd, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	var addrs []string
	for range 3 {
		s := startClusterNode(t, etcd, Roles{}, ingest.AckQuorum)
		defer s.Close()
		addrs = append(addrs, s.GRPCAddr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	got := slices.Clone(c.Endpoints())
	slices.Sort(got)
	slices.Sort(addrs)
	if !slices.Equal(got, addrs) {
		t.Fatalf("client learned %v, want %v", got, addrs)
	}
}
