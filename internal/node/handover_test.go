package node

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/internal/etcdserver"
)

// producedAck is one acknowledged message of a producer instance.
type producedAck struct {
	seq    int
	offset uint64
	value  string
}

// TestInitProducerOnAnotherNodeFencesTheLiveOwner: a producer registers
// again on a second ingest node while its first owner is alive and its old
// instance keeps producing there (DESIGN.md §6). The new owner has the old
// owner release it (or revokes the old owner's lease) before it takes the
// producer over, so the old owner can log nothing more for it: no
// (producer, seq) is logged twice, the old instance has no acknowledged
// offset above the new instance's first, and every acknowledged message is
// read back at its offset.
func TestInitProducerOnAnotherNodeFencesTheLiveOwner(t *testing.T) {
	seq, a, b, ctx := startHandoverNodes(t)

	old, err := dial(t, a).NewProducer(ctx, "moving", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	var (
		mu      sync.Mutex
		oldAcks []producedAck
		twenty  = make(chan struct{})
		stopped = make(chan struct{})
	)
	go func() { // the old instance produces until it is refused
		defer close(stopped)
		for i := 0; ; i++ {
			callCtx, callCancel := context.WithTimeout(ctx, 10*time.Second)
			value := fmt.Sprintf("old-%d", i)
			acks, err := old.Produce(callCtx, msg("t", "", value))
			callCancel()
			if err != nil {
				return
			}
			mu.Lock()
			oldAcks = append(oldAcks, producedAck{i, acks[0].Offset, value})
			if len(oldAcks) == 20 {
				close(twenty)
			}
			mu.Unlock()
		}
	}()
	select {
	case <-twenty:
	case <-stopped:
		t.Fatal("the old instance stopped before 20 acks")
	}

	renewed, err := dial(t, b).NewProducer(ctx, "moving", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer renewed.Close()
	var newAcks []producedAck
	for i := range 20 {
		value := fmt.Sprintf("new-%d", i)
		acks, err := renewed.Produce(ctx, msg("t", "", value))
		if err != nil {
			t.Fatal(err)
		}
		newAcks = append(newAcks, producedAck{i, acks[0].Offset, value})
	}
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("the old instance was never refused after the producer moved")
	}

	mu.Lock()
	defer mu.Unlock()
	for _, ack := range oldAcks {
		if ack.offset > newAcks[0].offset {
			t.Errorf("old instance's %s acknowledged at %d, above the new instance's first offset %d", ack.value, ack.offset, newAcks[0].offset)
		}
	}
	last := newAcks[len(newAcks)-1].offset
	reader := dial(t, seq)
	waitCommitted(t, reader, last+1)
	stored, _ := readAll(t, reader)
	byOffset := make(map[uint64]string)
	seqs := make(map[uint64]uint64) // producer seq → offset
	id, _ := renewed.ID()
	for _, m := range stored {
		byOffset[m.Offset] = string(m.Message.Value)
		if m.ProducerId != id {
			continue
		}
		if other, ok := seqs[m.ProducerSeq]; ok {
			t.Errorf("seq %d logged twice: offsets %d and %d", m.ProducerSeq, other, m.Offset)
		}
		seqs[m.ProducerSeq] = m.Offset
	}
	for _, ack := range append(oldAcks, newAcks...) {
		if byOffset[ack.offset] != ack.value {
			t.Errorf("%s acknowledged at %d, which holds %q", ack.value, ack.offset, byOffset[ack.offset])
		}
	}
	t.Logf("old instance: %d acks; new instance from offset %d", len(oldAcks), newAcks[0].offset)
}

// TestAProducerMoveLeavesTheOldOwnersOtherProducersAlone: producers move
// from node a to node b (an InitProducer there, and an Idempotency-Key
// bucket taken by b's HTTP API) while another producer keeps producing on
// a. a hands each of them over by Release: it keeps its etcd lease and its
// incarnation, and the other producer is never refused. Before, every move
// revoked a's lease, and with it every producer a owned (in the chaos runs,
// HTTP clients that moved on errors reset two nodes back and forth).
func TestAProducerMoveLeavesTheOldOwnersOtherProducersAlone(t *testing.T) {
	_, a, b, ctx := startHandoverNodes(t)
	incarnation := a.ingest.Incarnation()

	bystander, err := dial(t, a).NewProducer(ctx, "bystander", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer bystander.Close()
	stop := make(chan struct{})
	refused := make(chan error, 1)
	done := make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := bystander.Produce(ctx, msg("t", "", fmt.Sprint(n))); err != nil {
				refused <- err
				return
			}
			n++
		}
	}()

	for i := range 3 {
		name := fmt.Sprintf("mover-%d", i)
		p, err := dial(t, a).NewProducer(ctx, name, client.ProducerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Produce(ctx, msg("t", "", "on a")); err != nil {
			t.Fatal(err)
		}
		moved, err := dial(t, b).NewProducer(ctx, name, client.ProducerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := moved.Produce(ctx, msg("t", "", "on b")); err != nil {
			t.Fatal(err)
		}
		p.Close()
		moved.Close()
	}
	key := map[string]string{"Idempotency-Key": "order-17"}
	var first string
	for i, s := range []*Server{a, b, a} {
		code, _, raw := httpDo(t, "POST", "http://"+s.HTTPAddr()+"/v1/messages", `{"topic":"t","payload":"keyed"}`, key)
		offset := regexp.MustCompile(`"offset":\d+`).FindString(raw)
		switch {
		case code != 200 || offset == "":
			t.Fatalf("keyed POST to %s: %d %s", s.HTTPAddr(), code, raw)
		case i == 0:
			first = offset
		case offset != first || !strings.Contains(raw, `"duplicate":true`):
			t.Fatalf("keyed POST retried on %s: %s, want the duplicate of %s", s.HTTPAddr(), raw, first)
		}
	}
	close(stop)
	n := <-done
	select {
	case err := <-refused:
		t.Fatalf("the bystander on the old owner was refused after %d messages: %v", n, err)
	default:
	}
	if got := a.ingest.Incarnation(); got != incarnation {
		t.Fatalf("node a went from incarnation %s to %s: its lease was lost", incarnation, got)
	}
	t.Logf("the bystander produced %d messages on a while producers moved away from it", n)
}

// startHandoverNodes starts a sequencer-and-reader node and two ingest
// nodes a and b on one etcd (no replication), ready; they stop when the
// test ends.
func startHandoverNodes(t *testing.T) (seq, a, b *Server, ctx context.Context) {
	t.Helper()
	etcd, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	start := func(roles Roles) *Server {
		s := startNodeOn(t, etcd, roles, ingest.Config{}, Replication{})
		t.Cleanup(s.Close)
		return s
	}
	seq = start(Roles{Sequencer: true, Reader: true})
	a, b = start(Roles{Ingest: true}), start(Roles{Ingest: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	waitAllReady(t, ctx, seq, a, b)
	return seq, a, b, ctx
}
