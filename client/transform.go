package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"orderlog/internal/apierr"
	"orderlog/internal/groupcommit"
	"orderlog/proto/orderlogpb"
)

// TransformOptions configures Client.Transform.
type TransformOptions struct {
	GroupOptions
	// ProducerPrefix names the output producers, one per input partition:
	// "<ProducerPrefix><topic>/<partition>" (default "<group>/").
	ProducerPrefix string
}

// Transform runs a consume-transform-produce loop whose outputs are
// exactly once: each input message's outputs are in the log once, however
// often the loop (or the member running it) crashes and starts again. fn
// maps an input to its outputs (none is allowed) and must be
// deterministic enough that a repeated input may produce either output.
//
// How: every input partition has its own producer session. The outputs of
// a batch of one partition go in one frame that also carries the group's
// offset commit for that partition, so the commit is logged with the
// outputs or not at all. A member that takes a partition over calls
// InitProducer for it (fencing any older instance and settling its
// frames), reads the commit in that producer's last message, and resumes
// the partition there: the inputs whose outputs are logged are never done
// again. Inputs without outputs are committed to the group as usual.
//
// A rebalance closes every producer (delivery restarts from the stored
// offsets at each generation, so resume points are found again); a fenced
// frame or a retryable failure makes the loop join again as a new member,
// after a pause, so nothing it was doing is skipped. Transform returns
// when ctx ends or on an error that is not retryable.
func (c *Client) Transform(ctx context.Context, opts TransformOptions, fn func(GroupMessage) []*orderlogpb.Message) error {
	if opts.ProducerPrefix == "" {
		opts.ProducerPrefix = opts.Group + "/"
	}
	opts.AutoCommit = -1 // commits ride with the outputs, or are explicit
	pause := tailRetryFirst
	for {
		err := ignoreEnd(ctx, c.transformOnce(ctx, opts, fn))
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, errRejoin) && apierr.As(err).Class() != apierr.ClassRetry {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		pause = min(2*pause, tailRetryMax)
	}
}

// errRejoin asks Transform to start over as a new member: a frame was
// fenced by another instance, so the inputs it held are not done and the
// delivery they came from cannot be taken up where it was.
var errRejoin = errors.New("transform: a partition's producer was fenced; joining again")

// transformOnce is one membership of a transform loop.
func (c *Client) transformOnce(ctx context.Context, opts TransformOptions, fn func(GroupMessage) []*orderlogpb.Message) error {
	member, err := c.JoinGroup(ctx, opts.GroupOptions)
	if err != nil {
		return err
	}
	t := &transform{client: c, opts: opts, member: member, outputs: map[TopicPartition]*partitionOutput{}}
	defer t.close()
	for {
		batch, err := member.Poll(ctx)
		if err == nil {
			err = t.handle(ctx, batch, fn)
		}
		if err != nil {
			return err
		}
	}
}

// ignoreEnd is err unless ctx has ended (what failed then was cut short).
// A call can fail on ctx's deadline a moment before ctx says so.
func ignoreEnd(ctx context.Context, err error) error {
	if deadline, ok := ctx.Deadline(); ctx.Err() != nil || ok && !time.Now().Before(deadline) {
		return nil
	}
	return err
}

type transform struct {
	client     *Client
	opts       TransformOptions
	member     *GroupMember
	generation uint64
	outputs    map[TopicPartition]*partitionOutput
}

// partitionOutput is one input partition's producer and how far its
// inputs are done.
type partitionOutput struct {
	producer *Producer
	resume   uint64 // the first input offset not done
}

func (t *transform) close() {
	for _, o := range t.outputs {
		o.producer.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
	defer cancel()
	_ = t.member.Close(ctx)
}

// handle does one batch: per partition, the outputs of the inputs not done
// yet, in one frame with the partition's commit.
func (t *transform) handle(ctx context.Context, batch *GroupBatch, fn func(GroupMessage) []*orderlogpb.Message) error {
	a := t.member.Assignment()
	if a.Generation != t.generation {
		// Every producer goes: one kept for a partition held again may
		// have been fenced by the owner in between, and delivery restarts
		// from the stored offsets anyway; a new one finds its resume point.
		for tp, o := range t.outputs {
			o.producer.Close()
			delete(t.outputs, tp)
		}
		t.generation = a.Generation
	}
	if batch.Generation != a.Generation {
		return nil
	}
	var order []TopicPartition
	inputs := map[TopicPartition][]GroupMessage{}
	for _, m := range batch.Messages {
		tp := m.TopicPartition()
		if _, ok := inputs[tp]; !ok {
			order = append(order, tp)
		}
		inputs[tp] = append(inputs[tp], m)
	}
	type sent struct {
		tp      TopicPartition
		pending *Pending
		done    []GroupMessage
	}
	var frames []sent
	for _, tp := range order {
		out, err := t.output(ctx, tp, a)
		if err != nil {
			return err
		}
		var todo []GroupMessage
		var produced []*orderlogpb.Message
		for _, m := range inputs[tp] {
			if m.Offset >= out.resume {
				todo = append(todo, m)
				for _, o := range fn(m) {
					produced = append(produced, withoutGroupCommit(o))
				}
			}
		}
		if len(todo) == 0 {
			continue
		}
		next := todo[len(todo)-1].Next()
		if len(produced) == 0 { // nothing to log: an ordinary group commit
			t.member.MarkProcessed(todo...)
			out.resume = next
			continue
		}
		commit := &orderlogpb.GroupCommit{Group: t.opts.Group, MemberId: a.MemberID, Generation: a.Generation,
			Offsets: []*orderlogpb.PartitionOffset{{Topic: tp.Topic, Partition: tp.Partition, Offset: next}}}
		pending, err := out.producer.SendWithCommit(ctx, commit, produced...)
		if err != nil {
			return err
		}
		frames = append(frames, sent{tp, pending, todo})
		out.resume = next
	}
	for _, f := range frames {
		if _, err := f.pending.Wait(ctx); err != nil {
			if e := apierr.As(err); e.Code == apierr.ProducerFenced || errors.Is(err, ErrProducerClosed) {
				return errRejoin // not logged: these inputs must be done again
			}
			return err
		}
		t.member.MarkProcessed(f.done...)
	}
	// Marks of inputs without outputs; a failed commit only means they may
	// be done again (they log nothing), so it is retried with the next.
	_ = t.member.Commit(ctx)
	return nil
}

// output is the partition's producer, made when the member first gets
// the partition: InitProducer fences older instances, and the commit in
// its last message says where the partition's inputs resume.
func (t *transform) output(ctx context.Context, tp TopicPartition, a GroupAssignment) (*partitionOutput, error) {
	if o, ok := t.outputs[tp]; ok {
		return o, nil
	}
	name := fmt.Sprintf("%s%s/%d", t.opts.ProducerPrefix, tp.Topic, tp.Partition)
	p, err := t.client.NewProducer(ctx, name, ProducerOptions{})
	if err != nil {
		return nil, err
	}
	o := &partitionOutput{producer: p, resume: a.Partitions[tp]}
	if last, ok := p.LastOffset(); ok {
		committed, err := t.committedAt(ctx, last, tp)
		if err != nil {
			p.Close()
			return nil, err
		}
		o.resume = max(o.resume, committed)
	}
	t.outputs[tp] = o
	return o, nil
}

// committedAt is the offset the commit in the message at offset last
// gives partition tp of this group (0: none).
func (t *transform) committedAt(ctx context.Context, last uint64, tp TopicPartition) (uint64, error) {
	if err := t.client.WaitCommitted(ctx, last+1); err != nil {
		return 0, err
	}
	var found uint64
	err := t.client.Read(ctx, last, 1, func(page *Page) error {
		for _, m := range page.Messages {
			if m.Offset != last {
				continue
			}
			c, ok, err := groupcommit.Find(m.Message)
			if err != nil || !ok || c.Group != t.opts.Group {
				return err
			}
			for _, o := range c.Offsets {
				if o.Topic == tp.Topic && o.Partition == tp.Partition {
					found = o.Offset
				}
			}
		}
		return nil
	})
	if err != nil && apierr.As(err).Code == apierr.OffsetOutOfRange { // below the log start: the group's offset stands
		return 0, nil
	}
	return found, err
}

// withoutGroupCommit is m without a group-commit header (an input copied
// as it is, or an output of another loop, carries one; the node refuses
// it from a client): the frame's own commit is the one that counts.
func withoutGroupCommit(m *orderlogpb.Message) *orderlogpb.Message {
	for i, h := range m.GetHeaders() {
		if h.Key == groupcommit.Header {
			out := proto.Clone(m).(*orderlogpb.Message)
			out.Headers = append(out.Headers[:i:i], out.Headers[i+1:]...)
			return out
		}
	}
	return m
}
