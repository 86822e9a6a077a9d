package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// GroupOptions configures a consumer group member.
type GroupOptions struct {
	Group string
	// Topics to consume (none: the default topic).
	Topics []string
	// ClientName names the member in descriptions.
	ClientName string
	// SessionTimeout: how long the member stays in the group after its
	// node stops hearing from it (0: the server's 10 s).
	SessionTimeout time.Duration
	// Start is where a partition without a committed offset starts:
	// "earliest" (default) or "latest".
	Start string
	// AutoCommit commits what MarkProcessed recorded at this interval
	// (0: every second; negative: only Commit and Close commit).
	AutoCommit time.Duration
}

// TopicPartition names one virtual partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition uint32
}

// GroupMessage is a message delivered to a member, with its virtual
// partition and the generation it was delivered in.
type GroupMessage struct {
	*orderlogpb.StoredMessage
	Partition  uint32
	Generation uint64
}

// Next is the offset to commit once m is processed.
func (m GroupMessage) Next() uint64 { return m.Offset + 1 }

// TopicPartition is m's topic and partition.
func (m GroupMessage) TopicPartition() TopicPartition {
	return TopicPartition{m.Message.GetTopic(), m.Partition}
}

// GroupBatch is what Poll returns: messages of the member's partitions in
// global offset order, and the skipped ranges (holes, compacted ranges)
// met on the way, as reads report them.
type GroupBatch struct {
	Messages   []GroupMessage
	Skipped    []*orderlogpb.SkippedRange
	Generation uint64
}

// GroupAssignment is the member's partitions in one generation, with the
// offset each one resumed at.
type GroupAssignment struct {
	MemberID   string
	Generation uint64
	Partitions map[TopicPartition]uint64
}

// GroupMember is one member of a consumer group. Poll from one goroutine;
// MarkProcessed, Commit and Assignment are safe from any.
type GroupMember struct {
	client *Client
	opts   GroupOptions
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	events chan groupEvent // batches and assignments, in stream order

	mu struct {
		sync.Mutex
		assignment GroupAssignment
		// marked is the next offset to commit per partition; committed is
		// what the group stored (as far as this member knows).
		marked, committed map[TopicPartition]uint64
		stream            orderlogpb.Consumer_ConsumeClient
		closed            bool
		fatal             error
	}
	sendMu sync.Mutex // one Send at a time on the stream
}

type groupEvent struct {
	batch      *orderlogpb.ConsumeBatch
	assignment *orderlogpb.Assignment
	err        error
}

// JoinGroup joins a consumer group and starts receiving; the first Poll
// returns once the member has its assignment and messages.
func (c *Client) JoinGroup(ctx context.Context, opts GroupOptions) (*GroupMember, error) {
	if opts.Group == "" {
		return nil, apierr.New(apierr.InvalidArgument, "a group name is required")
	}
	if opts.AutoCommit == 0 {
		opts.AutoCommit = time.Second
	}
	m := &GroupMember{client: c, opts: opts, done: make(chan struct{}), events: make(chan groupEvent, 16)}
	m.mu.marked, m.mu.committed = map[TopicPartition]uint64{}, map[TopicPartition]uint64{}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	stream, err := m.open(ctx)
	if err != nil {
		m.cancel()
		return nil, err
	}
	go m.run(stream)
	return m, nil
}

// open opens a Consume stream at the client's current endpoint and joins.
func (m *GroupMember) open(ctx context.Context) (orderlogpb.Consumer_ConsumeClient, error) {
	addr := m.client.endpoints.current()
	conn, err := m.client.endpoints.conn(addr)
	if err != nil {
		return nil, err
	}
	stream, err := orderlogpb.NewConsumerClient(conn).Consume(m.ctx)
	if err == nil {
		err = stream.Send(&orderlogpb.ConsumeRequest{Request: &orderlogpb.ConsumeRequest_Join{Join: &orderlogpb.JoinGroup{
			Group: m.opts.Group, Topics: m.opts.Topics, ClientName: m.opts.ClientName,
			SessionTimeoutMs: uint32(m.opts.SessionTimeout / time.Millisecond), Start: m.opts.Start}}})
	}
	if err != nil {
		if e := apierr.FromGRPC(err); nodeFailed(ctx, e) {
			m.client.nodeFailed(addr)
		}
		return nil, apierr.FromGRPC(err)
	}
	m.mu.Lock()
	m.mu.stream = stream
	m.mu.Unlock()
	return stream, nil
}

// run receives from the stream, and after a retryable break joins again
// (as a new member: the group rebalances), until Close.
func (m *GroupMember) run(stream orderlogpb.Consumer_ConsumeClient) {
	defer close(m.done)
	stopCommits := m.autoCommit()
	defer stopCommits()
	pause := tailRetryFirst
	for {
		err := m.receive(stream)
		m.mu.Lock()
		m.mu.stream = nil
		m.mu.Unlock()
		if m.ctx.Err() != nil {
			return
		}
		if e := apierr.As(err); e.Class() != apierr.ClassRetry {
			m.fail(err)
			return
		}
		m.client.nodeFailed(m.client.endpoints.current())
		for {
			select {
			case <-m.ctx.Done():
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, tailRetryMax)
			if stream, err = m.open(m.ctx); err == nil {
				break
			}
			if e := apierr.As(err); e.Class() != apierr.ClassRetry {
				m.fail(err)
				return
			}
		}
		pause = tailRetryFirst
	}
}

// receive reads one stream until it fails.
func (m *GroupMember) receive(stream orderlogpb.Consumer_ConsumeClient) error {
	for {
		resp, err := stream.Recv()
		if err != nil {
			return apierr.FromGRPC(err)
		}
		switch r := resp.Response.(type) {
		case *orderlogpb.ConsumeResponse_Assignment:
			m.assign(r.Assignment)
			m.deliver(groupEvent{assignment: r.Assignment})
		case *orderlogpb.ConsumeResponse_Batch:
			m.deliver(groupEvent{batch: r.Batch})
		}
	}
}

// fail records a member's fatal error before run ends (Poll reports it,
// whether it sees the event or the end first).
func (m *GroupMember) fail(err error) {
	m.mu.Lock()
	m.mu.fatal = err
	m.mu.Unlock()
	m.deliver(groupEvent{err: err})
}

func (m *GroupMember) deliver(ev groupEvent) {
	select {
	case m.events <- ev:
	case <-m.ctx.Done():
	}
}

// assign installs a new generation's assignment. Marks for partitions the
// member keeps stay (they are committed under the new generation); marks
// for partitions it lost are dropped: their new owner resumes from what
// the group stored.
func (m *GroupMember) assign(a *orderlogpb.Assignment) {
	m.mu.Lock()
	defer m.mu.Unlock()
	parts := make(map[TopicPartition]uint64, len(a.Partitions))
	for _, p := range a.Partitions {
		tp := TopicPartition{p.Topic, p.Partition}
		parts[tp] = p.Offset
		m.mu.committed[tp] = p.Offset
	}
	for tp := range m.mu.marked {
		if _, kept := parts[tp]; !kept {
			delete(m.mu.marked, tp)
		}
	}
	for tp := range m.mu.committed {
		if _, kept := parts[tp]; !kept {
			delete(m.mu.committed, tp)
		}
	}
	m.mu.assignment = GroupAssignment{MemberID: a.MemberId, Generation: a.Generation, Partitions: parts}
}

// Assignment is the member's current assignment.
func (m *GroupMember) Assignment() GroupAssignment {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.assignment
}

// Poll returns the next batch of the member's messages, waiting for one.
// A partition kept across a rebalance may start again at its committed
// offset; Poll drops the messages below what MarkProcessed recorded for
// it, so a member sees again only what it had not marked.
func (m *GroupMember) Poll(ctx context.Context) (*GroupBatch, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-m.done:
			return nil, m.closedErr()
		case ev := <-m.events:
			switch {
			case ev.err != nil:
				m.mu.Lock()
				m.mu.fatal = ev.err
				m.mu.Unlock()
				return nil, ev.err
			case ev.batch != nil:
				if b := m.batchOf(ev.batch); len(b.Messages) > 0 || len(b.Skipped) > 0 {
					return b, nil
				}
			}
		}
	}
}

func (m *GroupMember) batchOf(in *orderlogpb.ConsumeBatch) *GroupBatch {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := &GroupBatch{Skipped: in.Skipped, Generation: in.Generation}
	if in.Generation != m.mu.assignment.Generation {
		return out // a batch of an earlier generation, received before its end
	}
	for i, sm := range in.Messages {
		gm := GroupMessage{StoredMessage: sm, Partition: in.Partitions[i], Generation: in.Generation}
		if mark, ok := m.mu.marked[gm.TopicPartition()]; ok && sm.Offset < mark {
			continue
		}
		out.Messages = append(out.Messages, gm)
	}
	return out
}

// MarkProcessed records that these messages are processed: the next
// commit stores, for each partition, the offset after the last one marked.
// Messages of partitions the member no longer holds are ignored.
func (m *GroupMember) MarkProcessed(msgs ...GroupMessage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, gm := range msgs {
		tp := gm.TopicPartition()
		if _, held := m.mu.assignment.Partitions[tp]; held && gm.Next() > m.mu.marked[tp] {
			m.mu.marked[tp] = gm.Next()
		}
	}
}

// Commit stores what MarkProcessed recorded and is not stored yet, in one
// request, and waits for the answer. It goes over the unary CommitOffsets
// call, not the member's stream: an answer queued behind batches the
// caller has not polled yet would never come. STALE_GENERATION means a
// rebalance took the partitions meanwhile; what is still held is committed
// again under the next generation.
func (m *GroupMember) Commit(ctx context.Context) error {
	m.mu.Lock()
	a := m.mu.assignment
	commit := &orderlogpb.GroupCommit{Group: m.opts.Group, MemberId: a.MemberID, Generation: a.Generation}
	sent := map[TopicPartition]uint64{}
	for tp, next := range m.mu.marked {
		if next > m.mu.committed[tp] { // never backwards: another member may have gone further
			commit.Offsets = append(commit.Offsets, &orderlogpb.PartitionOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: next})
			sent[tp] = next
		}
	}
	m.mu.Unlock()
	if len(commit.Offsets) == 0 || a.MemberID == "" {
		return nil
	}
	err := m.client.unary(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := orderlogpb.NewConsumerClient(conn).CommitOffsets(ctx, commit)
		return err
	})
	if err != nil {
		return apierr.FromGRPC(err)
	}
	m.mu.Lock()
	for tp, next := range sent {
		if _, held := m.mu.assignment.Partitions[tp]; held && m.mu.assignment.Generation == commit.Generation {
			m.mu.committed[tp] = max(m.mu.committed[tp], next)
		}
	}
	m.mu.Unlock()
	return nil
}

// autoCommit commits at the configured interval until the member closes.
func (m *GroupMember) autoCommit() (stop func()) {
	if m.opts.AutoCommit < 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(m.opts.AutoCommit)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
				_ = m.Commit(ctx) // a failed commit is retried at the next tick
				cancel()
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// ErrMemberClosed is returned by Poll after Close.
var ErrMemberClosed = errors.New("consumer group member closed")

func (m *GroupMember) closedErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.fatal != nil {
		return m.mu.fatal
	}
	return ErrMemberClosed
}

// Close commits what is marked and not stored (best effort, bounded by
// ctx) and leaves the group: its partitions go to the other members.
func (m *GroupMember) Close(ctx context.Context) error {
	err := m.Commit(ctx)
	m.mu.Lock()
	m.mu.closed = true
	stream := m.mu.stream
	m.mu.Unlock()
	if stream != nil {
		m.sendMu.Lock()
		_ = stream.CloseSend()
		m.sendMu.Unlock()
	}
	m.cancel()
	<-m.done
	return err
}

// DescribeGroup returns a group's members, assignment, committed offsets
// and lag.
func (c *Client) DescribeGroup(ctx context.Context, group string) (*orderlogpb.GroupDescription, error) {
	var d *orderlogpb.GroupDescription
	err := c.unary(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		d, err = orderlogpb.NewConsumerClient(conn).DescribeGroup(ctx, &orderlogpb.DescribeGroupRequest{Group: group})
		return err
	})
	if err != nil {
		return nil, apierr.FromGRPC(err)
	}
	return d, nil
}
