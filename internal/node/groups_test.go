package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// produceKeyed logs n messages of topic with keys k0..k(keys-1), values
// "v<i>", in one producer session, and returns their acks in order.
func produceKeyed(ctx context.Context, t *testing.T, c *client.Client, producer, topic string, n, keys int) []*orderlogpb.Ack {
	t.Helper()
	p, err := c.NewProducer(ctx, producer, client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var acks []*orderlogpb.Ack
	for i := 0; i < n; i += 50 {
		var frame []*orderlogpb.Message
		for j := i; j < min(n, i+50); j++ {
			frame = append(frame, msg(topic, fmt.Sprintf("k%d", j%keys), fmt.Sprintf("v%d", j)))
		}
		got, err := p.Produce(ctx, frame...)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, got...)
	}
	return acks
}

// pollUntil polls m until stop says enough, failing after the deadline.
func pollUntil(ctx context.Context, t *testing.T, m *client.GroupMember, stop func([]client.GroupMessage) bool) []client.GroupMessage {
	t.Helper()
	var got []client.GroupMessage
	for !stop(got) {
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		b, err := m.Poll(pctx)
		cancel()
		if err != nil {
			t.Fatalf("poll after %d messages: %v", len(got), err)
		}
		got = append(got, b.Messages...)
	}
	return got
}

// checkPartitionOrder fails unless each partition's messages come in
// increasing offset order.
func checkPartitionOrder(t *testing.T, msgs []client.GroupMessage) {
	t.Helper()
	last := map[client.TopicPartition]uint64{}
	for _, m := range msgs {
		tp := m.TopicPartition()
		if prev, ok := last[tp]; ok && m.Offset <= prev {
			t.Fatalf("partition %v: offset %d after %d", tp, m.Offset, prev)
		}
		last[tp] = m.Offset
	}
}

// TestGroupMembersSharePartitionsAndResumeWhereTheGroupCommitted: one
// member gets every partition; a second one joining splits them; the
// first leaves and the second resumes its partitions after the first's
// last commit; a commit from the first member's old generation is refused.
func TestGroupMembersSharePartitionsAndResumeWhereTheGroupCommitted(t *testing.T) {
	s, c, ctx := serverWithTopic(t, 2*time.Minute, "orders", 4)
	defer s.Close()
	acks := produceKeyed(ctx, t, c, "p1", "orders", 400, 40)
	produceKeyed(ctx, t, c, "p2", "other", 50, 5) // another topic: never delivered

	a, err := c.JoinGroup(ctx, client.GroupOptions{Group: "g", Topics: []string{"orders"}, ClientName: "a", AutoCommit: -1})
	if err != nil {
		t.Fatal(err)
	}
	all := pollUntil(ctx, t, a, func(got []client.GroupMessage) bool { return len(got) >= 400 })
	checkPartitionOrder(t, all)
	if len(all) != 400 {
		t.Fatalf("member a got %d messages, want 400", len(all))
	}
	for i, m := range all {
		if m.Message.Topic != "orders" || m.Partition != acks[m.Offset-acks[0].Offset].Partition {
			t.Fatalf("message %d: topic %q partition %d; produced as %d", i, m.Message.Topic, m.Partition, acks[m.Offset-acks[0].Offset].Partition)
		}
	}
	genA := a.Assignment().Generation
	if n := len(a.Assignment().Partitions); n != 4 {
		t.Fatalf("member a alone holds %d partitions, want 4", n)
	}
	// a processes the first half of every partition
	byPartition := map[uint32][]client.GroupMessage{}
	for _, m := range all {
		byPartition[m.Partition] = append(byPartition[m.Partition], m)
	}
	resumeAt := map[uint32]uint64{}
	for p, ms := range byPartition {
		half := ms[:len(ms)/2]
		a.MarkProcessed(half...)
		resumeAt[p] = half[len(half)-1].Next()
	}
	if err := a.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	b, err := c.JoinGroup(ctx, client.GroupOptions{Group: "g", Topics: []string{"orders"}, ClientName: "b", AutoCommit: -1})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a and b to split the partitions", func() bool {
		ga, gb := a.Assignment(), b.Assignment()
		return ga.Generation == gb.Generation && ga.Generation > genA && len(ga.Partitions) == 2 && len(gb.Partitions) == 2
	})
	// a's commit from its first generation is refused: it no longer holds half of them
	stale := &orderlogpb.GroupCommit{Group: "g", MemberId: a.Assignment().MemberID, Generation: genA,
		Offsets: []*orderlogpb.PartitionOffset{{Topic: "orders", Partition: 0, Offset: 399}}}
	_, err = orderlogpb.NewConsumerClient(grpcConn(t, s)).CommitOffsets(ctx, stale)
	if got := apierr.FromGRPC(err); got == nil || got.Code != apierr.StaleGeneration {
		t.Fatalf("a stale commit: %v, want STALE_GENERATION", err)
	}

	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "b to hold every partition", func() bool { return len(b.Assignment().Partitions) == 4 })
	for tp, start := range b.Assignment().Partitions {
		if start != resumeAt[tp.Partition] {
			t.Fatalf("b resumes %v at %d, want a's commit %d", tp, start, resumeAt[tp.Partition])
		}
	}
	want := 0
	for p, ms := range byPartition {
		want += len(ms) - len(ms)/2
		_ = p
	}
	rest := pollUntil(ctx, t, b, func(got []client.GroupMessage) bool {
		seen := map[uint64]bool{}
		for _, m := range got {
			seen[m.Offset] = true
		}
		return len(seen) >= want
	})
	checkPartitionOrder(t, slices.DeleteFunc(rest, func(m client.GroupMessage) bool { return m.Generation != b.Assignment().Generation }))
	for _, m := range rest {
		if m.Offset < resumeAt[m.Partition] {
			t.Fatalf("b got offset %d of partition %d, below a's commit %d", m.Offset, m.Partition, resumeAt[m.Partition])
		}
	}
	b.MarkProcessed(rest...)
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	desc, err := orderlogpb.NewConsumerClient(grpcConn(t, s)).DescribeGroup(ctx, &orderlogpb.DescribeGroupRequest{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if len(desc.Members) != 1 || len(desc.Partitions) != 4 {
		t.Fatalf("description: %d members, %d partitions", len(desc.Members), len(desc.Partitions))
	}
	for _, p := range desc.Partitions {
		if p.Committed == nil || p.Lag != desc.Committed-*p.Committed {
			t.Fatalf("partition %d: committed %v, lag %d, C %d", p.Partition, p.Committed, p.Lag, desc.Committed)
		}
	}
	// /metrics reports the same lag
	_, _, metrics := httpDo(t, "GET", "http://"+s.HTTPAddr()+"/metrics", "", nil)
	for _, p := range desc.Partitions {
		line := fmt.Sprintf(`orderlog_consumer_group_lag_offsets{group="g",partition="%d",topic="orders"} %d`, p.Partition, p.Lag)
		if !strings.Contains(metrics, line) {
			t.Fatalf("/metrics lacks %q", line)
		}
	}
	if !strings.Contains(metrics, `orderlog_consumer_group_members{group="g"} 1`) {
		t.Fatal("/metrics does not count the group's one member")
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTransformLoopOutputsEachInputOnceAcrossRestarts: a consume-
// transform-produce loop is stopped abruptly again and again (its frames
// in flight are left to the node) and started afresh; every input's output
// is in the log exactly once, and each partition's outputs are in input
// order.
func TestTransformLoopOutputsEachInputOnceAcrossRestarts(t *testing.T) {
	s, c, ctx := serverWithTopic(t, 3*time.Minute, "in", 4)
	defer s.Close()
	const inputs = 1000
	acks := produceKeyed(ctx, t, c, "src", "in", inputs, 64)
	transform := func(m client.GroupMessage) []*orderlogpb.Message {
		time.Sleep(20 * time.Microsecond) // work, so that loops are cut short mid-stream
		if m.Offset%10 == 3 {
			return nil // some inputs have no output
		}
		return []*orderlogpb.Message{msg("out", string(m.Message.Key), fmt.Sprint(m.Offset))}
	}
	want := 0
	for _, a := range acks {
		if a.Offset%10 != 3 {
			want++
		}
	}
	outputs := func() map[string]int {
		seen := map[string]int{}
		err := c.Query(ctx, &orderlogpb.QueryRequest{Topic: "out"}, func(p *client.Page) error {
			for _, m := range p.Messages {
				seen[string(m.Message.Value)]++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return seen
	}
	for cycle := 0; ; cycle++ {
		if cycle > 200 {
			t.Fatalf("after %d cycles %d of %d outputs", cycle, len(outputs()), want)
		}
		run, stop := context.WithTimeout(ctx, time.Duration(50+cycle%5*50)*time.Millisecond)
		err := c.Transform(run, client.TransformOptions{GroupOptions: client.GroupOptions{Group: "copy", Topics: []string{"in"}}}, transform)
		stop()
		if err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		waitCommitted(t, c, st.Committed)
		seen := outputs()
		for v, n := range seen {
			if n != 1 {
				t.Fatalf("cycle %d: input %s has %d outputs", cycle, v, n)
			}
		}
		if len(seen) == want {
			t.Logf("all %d outputs once after %d cycles", want, cycle+1)
			if cycle < 4 {
				t.Fatalf("only %d cycles: the loop was not stopped mid-stream often enough to test anything", cycle+1)
			}
			break
		}
	}
	// per key, outputs come in input order
	lastInput := map[string]uint64{}
	err := c.Query(ctx, &orderlogpb.QueryRequest{Topic: "out"}, func(p *client.Page) error {
		for _, m := range p.Messages {
			var in uint64
			fmt.Sscan(string(m.Message.Value), &in)
			if prev, ok := lastInput[string(m.Message.Key)]; ok && in <= prev {
				return fmt.Errorf("key %s: output of input %d after that of %d", m.Message.Key, in, prev)
			}
			lastInput[string(m.Message.Key)] = in
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestIdempotentSinkSeesEachMessageOnce: the pattern for sinks outside
// orderlog (docs/consumers.md). The sink stores each partition's next
// offset with the rows, in one atomic write; a consumer that starts again
// skips what the sink has, whatever the group committed. Consumers are cut
// short again and again; the sink ends with every message once.
func TestIdempotentSinkSeesEachMessageOnce(t *testing.T) {
	s, c, ctx := serverWithTopic(t, 2*time.Minute, "events", 4)
	defer s.Close()
	const n = 1500
	produceKeyed(ctx, t, c, "events-src", "events", n, 30)
	sinkFile := filepath.Join(t.TempDir(), "sink.json")
	type sink struct {
		Next map[uint32]uint64 `json:"next"` // per partition: the offset after the last row
		Rows []string          `json:"rows"`
	}
	load := func() sink {
		var sk sink
		b, err := os.ReadFile(sinkFile)
		if err == nil {
			err = json.Unmarshal(b, &sk)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if sk.Next == nil {
			sk.Next = map[uint32]uint64{}
		}
		return sk
	}
	store := func(sk sink) { // the sink's transaction: rows and offsets together
		b, _ := json.Marshal(sk)
		if err := os.WriteFile(sinkFile+".tmp", b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(sinkFile+".tmp", sinkFile); err != nil {
			t.Fatal(err)
		}
	}
	for cycle := 0; len(load().Rows) < n; cycle++ {
		if cycle > 100 {
			t.Fatalf("after %d cycles the sink has %d of %d rows", cycle, len(load().Rows), n)
		}
		run, stop := context.WithTimeout(ctx, time.Duration(40+cycle%4*40)*time.Millisecond)
		m, err := c.JoinGroup(run, client.GroupOptions{Group: "sink", Topics: []string{"events"}, AutoCommit: 30 * time.Millisecond})
		if err != nil {
			stop()
			continue
		}
		sk := load()
		for run.Err() == nil {
			b, err := m.Poll(run)
			if err != nil {
				break
			}
			var fresh []client.GroupMessage
			for _, gm := range b.Messages {
				if gm.Offset >= sk.Next[gm.Partition] { // the sink has the rest
					fresh = append(fresh, gm)
					sk.Rows = append(sk.Rows, string(gm.Message.Value))
					sk.Next[gm.Partition] = gm.Next()
				}
			}
			store(sk)
			m.MarkProcessed(fresh...) // after the sink: the group may lag it, never lead it
		}
		stop()
		closeCtx, cancelClose := context.WithTimeout(ctx, 5*time.Second)
		_ = m.Close(closeCtx)
		cancelClose()
	}
	rows := load().Rows
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r] {
			t.Fatalf("row %s is in the sink twice", r)
		}
		seen[r] = true
	}
	if len(rows) != n {
		t.Fatalf("the sink has %d rows, want %d", len(rows), n)
	}
}

// TestTransformLoopsShareABacklogExactlyOnce: loops run side by side over
// a backlog (no loop is cut short; members come and go, so producers are
// fenced by the partitions' next owners mid-batch), and each input's
// output is logged once, with a group commit riding in a copied input's
// headers dropped rather than refused.
func TestTransformLoopsShareABacklogExactlyOnce(t *testing.T) {
	s, c, ctx := serverWithTopic(t, 3*time.Minute, "in", 4)
	defer s.Close()
	ctx, cancel := context.WithCancel(ctx) // ends the loops that stay
	defer cancel()
	const inputs = 6000
	produceKeyed(ctx, t, c, "src", "in", inputs, 64)
	opts := client.TransformOptions{GroupOptions: client.GroupOptions{Group: "share", Topics: []string{"in"}, SessionTimeout: 2 * time.Second}}
	copyAll := func(m client.GroupMessage) []*orderlogpb.Message {
		time.Sleep(20 * time.Microsecond)
		return []*orderlogpb.Message{{Topic: "out", Key: m.Message.Key, Value: []byte(fmt.Sprint(m.Offset)), Headers: m.Message.Headers}}
	}
	run := func(d time.Duration) chan error {
		done := make(chan error, 1)
		rctx, stop := context.WithTimeout(ctx, d)
		go func() { defer stop(); done <- c.Transform(rctx, opts, copyAll) }()
		return done
	}
	count := func() (map[string]int, int) {
		seen := map[string]int{}
		err := c.Query(ctx, &orderlogpb.QueryRequest{Topic: "out"}, func(p *client.Page) error {
			for _, m := range p.Messages {
				seen[string(m.Message.Value)]++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		dups := 0
		for _, n := range seen {
			dups += n - 1
		}
		return seen, dups
	}
	a := run(2 * time.Minute)
	waitFor(t, time.Minute, "the first loop to start copying", func() bool { seen, _ := count(); return len(seen) > 200 })
	b := run(1500 * time.Millisecond) // joins, takes half, leaves
	if err := <-b; err != nil {
		t.Fatalf("the second loop: %v", err)
	}
	d := run(2 * time.Minute) // a third joins and stays
	waitFor(t, 2*time.Minute, "every input copied", func() bool {
		st, err := c.Status(ctx)
		if err == nil {
			_ = c.WaitCommitted(ctx, st.Committed)
		}
		seen, dups := count()
		if dups > 0 {
			t.Fatalf("%d outputs logged twice", dups)
		}
		return len(seen) == inputs
	})
	cancel()
	for _, done := range []chan error{a, d} {
		if err := <-done; err != nil {
			t.Fatalf("a loop: %v", err)
		}
	}
}

// TestLatestIsWhereTheGroupFirstTookThePartition: a member joining with
// start=latest, then a rebalance before its first commit, does not skip
// what came in between: the partition resumes where the group first took
// it, not at the watermark of the rebalance.
func TestLatestIsWhereTheGroupFirstTookThePartition(t *testing.T) {
	s, c, ctx := serverWithTopic(t, time.Minute, "news", 2)
	defer s.Close()
	produceKeyed(ctx, t, c, "old", "news", 50, 10) // before the group: never delivered
	a, err := c.JoinGroup(ctx, client.GroupOptions{Group: "late", Topics: []string{"news"}, Start: "latest", AutoCommit: -1})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a's assignment", func() bool { return len(a.Assignment().Partitions) == 2 })
	starts := a.Assignment().Partitions
	acks := produceKeyed(ctx, t, c, "new", "news", 100, 10)
	b, err := c.JoinGroup(ctx, client.GroupOptions{Group: "late", Topics: []string{"news"}, Start: "latest", AutoCommit: -1})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the rebalance", func() bool {
		return len(a.Assignment().Partitions) == 1 && len(b.Assignment().Partitions) == 1
	})
	for _, m := range []*client.GroupMember{a, b} {
		for tp, start := range m.Assignment().Partitions {
			if start != starts[tp] {
				t.Fatalf("%v resumes at %d after the rebalance; the group took it at %d", tp, start, starts[tp])
			}
		}
	}
	got := map[uint64]bool{}
	for _, m := range []*client.GroupMember{a, b} {
		for _, gm := range pollUntil(ctx, t, m, func(got []client.GroupMessage) bool { return len(got) >= 50 }) {
			got[gm.Offset] = true
		}
	}
	for _, ack := range acks {
		if !got[ack.Offset] {
			t.Fatalf("offset %d, logged after the group joined, was never delivered", ack.Offset)
		}
	}
}

// TestPollReportsWhyAMemberFailed: a join for a topic that does not exist
// fails Poll with UNKNOWN_TOPIC every time, not "closed".
func TestPollReportsWhyAMemberFailed(t *testing.T) {
	s := startServer(t, t.TempDir())
	defer s.Close()
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 20 {
		m, err := c.JoinGroup(ctx, client.GroupOptions{Group: "g", Topics: []string{"nope"}})
		if err == nil {
			_, err = m.Poll(ctx)
		}
		if e := apierr.As(err); e == nil || e.Code != apierr.UnknownTopic {
			t.Fatalf("a join for a missing topic: %v", err)
		}
	}
}

// serverWithTopic starts a server, a client of it, a context that ends
// after d (and with the test), and a topic of that many partitions.
func serverWithTopic(t *testing.T, d time.Duration, topic string, partitions uint32) (*Server, *client.Client, context.Context) {
	t.Helper()
	s := startServer(t, t.TempDir())
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	if _, err := c.CreateTopicWith(ctx, &orderlogpb.CreateTopicRequest{Name: topic, Partitions: partitions}); err != nil {
		s.Close()
		t.Fatal(err)
	}
	return s, c, ctx
}
