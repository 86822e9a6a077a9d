package ingest

import (
	"context"
	"errors"
	"strconv"
	"time"

	"orderlog/ingest/coordinator"
	"orderlog/ingest/httpapi"
	"orderlog/internal/apierr"
	"orderlog/internal/groupcommit"
	"orderlog/internal/partition"
	"orderlog/proto/orderlogpb"
)

// Produce queues one frame; answer is called exactly once, from the node's
// loop goroutine, when every message of the frame is logged (or the frame
// is refused). It must not block.
func (n *Node) Produce(req *orderlogpb.ProduceRequest, answer func(*orderlogpb.ProduceResponse)) {
	n.ProduceFromBuffer(req, nil, answer)
}

// ProduceFromBuffer is Produce for a request whose bytes fields alias a
// receive buffer: release (if not nil) is called once, on the node's loop
// goroutine, when the frame is answered and none of its messages is waiting
// to be logged any more — or never, if the node stops first.
func (n *Node) ProduceFromBuffer(req *orderlogpb.ProduceRequest, release func(), answer func(*orderlogpb.ProduceResponse)) {
	defaultTopics(req.Messages) // before the frame digests a keyed message
	var f *frame
	f = newFrame(req, release, func(resp *orderlogpb.ProduceResponse) {
		setPartitions(resp, f.partitions)
		n.metrics.observeFrame(resp, f)
		answer(resp)
		if req.GroupCommit != nil && resp.ErrorCode == "" && n.cfg.GroupCommitted != nil {
			n.cfg.GroupCommitted(req.GroupCommit)
		}
	})
	if err := n.validate(req); err != nil {
		f.refuse(err)
		return
	}
	if err := n.checkSchemas(req.Messages); err != nil {
		f.refuse(err)
		return
	}
	if err := attachGroupCommit(req); err != nil {
		f.refuse(err)
		return
	}
	if err := n.admit(len(req.Messages)); err != nil { // before the frame reaches the pipeline
		f.refuse(err)
		return
	}
	partitions, err := n.partitionsOf(req.Messages)
	if err != nil {
		f.refuse(err)
		return
	}
	f.partitions = partitions
	req.Ack = n.ackMode(req.Ack)
	if !n.do(func() { n.produce(f) }) {
		f.refuse(apierr.New(apierr.Unavailable, "ingest node is shutting down"))
	}
}

func (n *Node) produce(f *frame) {
	f.times.queued = time.Now()
	n.machine.Produce(&f.Frame)
}

// defaultTopics gives the messages that name no topic httpapi.DefaultTopic.
func defaultTopics(messages []*orderlogpb.Message) {
	for _, m := range messages {
		if m != nil && m.Topic == "" {
			m.Topic = httpapi.DefaultTopic
		}
	}
}

// ensureTopicTimeout bounds the etcd transaction that creates a topic on
// its first message.
const ensureTopicTimeout = 5 * time.Second

// partitionsOf returns each message's virtual partition (partition.Of the
// key in its topic). A topic this node has not seen is created if it does
// not exist yet and its partition count read, before the frame is queued:
// the answer names the partitions, and a count is fixed once the topic
// exists. That one etcd transaction per new topic and node is the only
// wait; frames are mostly of one topic, looked up once.
func (n *Node) partitionsOf(messages []*orderlogpb.Message) ([]uint32, error) {
	partitions := make([]uint32, len(messages))
	topic, count := "", uint32(0)
	for i, m := range messages {
		if i == 0 || m.Topic != topic {
			ctx, cancel := context.WithTimeout(context.Background(), ensureTopicTimeout)
			c, err := n.topics.Ensure(ctx, m.Topic)
			cancel()
			if err != nil {
				return nil, err
			}
			topic, count = m.Topic, c
		}
		partitions[i] = partition.Of(m.Key, count)
	}
	return partitions, nil
}

// setPartitions names each ack's partition (computed when the frame came in).
func setPartitions(resp *orderlogpb.ProduceResponse, partitions []uint32) {
	for i, ack := range resp.Acks {
		if ack != nil && i < len(partitions) {
			ack.Partition = partitions[i]
		}
	}
}

// ackMode resolves a request's ack mode: the node's (--ack-mode) unless
// the request names one.
func (n *Node) ackMode(asked orderlogpb.AckMode) orderlogpb.AckMode {
	switch {
	case asked != orderlogpb.AckMode_ACK_MODE_DEFAULT:
		return asked
	case n.cfg.AckMode == AckLeader:
		return orderlogpb.AckMode_ACK_MODE_LEADER
	}
	return orderlogpb.AckMode_ACK_MODE_REPLICATED
}

// ProduceSync is Produce for callers that want to wait (the HTTP API).
func (n *Node) ProduceSync(ctx context.Context, req *orderlogpb.ProduceRequest) ([]*orderlogpb.Ack, error) {
	if err := n.authorizeFrame(ctx, req); err != nil {
		return nil, err
	}
	done := make(chan *orderlogpb.ProduceResponse, 1)
	n.Produce(req, func(resp *orderlogpb.ProduceResponse) { done <- resp })
	select {
	case resp := <-done:
		if resp.ErrorCode != "" {
			err := &apierr.Error{Code: apierr.Code(resp.ErrorCode), Message: resp.ErrorMessage}
			if err.Code == apierr.OutOfOrderSequence { // 0 is an expected seq too
				err = err.With("expected_seq", strconv.FormatUint(resp.ExpectedSeq, 10))
			}
			return nil, err
		}
		return resp.Acks, nil
	case <-ctx.Done():
		return nil, apierr.New(apierr.Timeout, "no answer yet; retry with the same producer seq: %v", ctx.Err())
	}
}

// validate refuses frames that break the limits, before anything is queued.
func (n *Node) validate(req *orderlogpb.ProduceRequest) error {
	switch {
	case len(req.Messages) == 0:
		return apierr.New(apierr.InvalidArgument, "a produce frame needs at least one message")
	case len(req.Messages) > n.cfg.MaxFrameMessages:
		return apierr.New(apierr.BatchTooLarge, "%d messages exceed the frame limit %d", len(req.Messages), n.cfg.MaxFrameMessages)
	case req.ProducerId == 0 && (req.Epoch != 0 || req.FirstSeq != 0):
		return apierr.New(apierr.InvalidArgument, "epoch and first_seq need a producer_id")
	case req.ProducerId != 0 && req.Epoch == 0: // InitProducer's epochs start at 1
		return apierr.New(apierr.InvalidArgument, "a producer_id needs the epoch InitProducer gave it")
	case req.IdempotencyKey != "":
		if err := validateIdempotencyKey(req); err != nil {
			return err
		}
	}
	if _, known := orderlogpb.AckMode_name[int32(req.Ack)]; !known {
		return apierr.New(apierr.InvalidArgument, "ack mode %d: want leader (1) or replicated (2)", req.Ack)
	}
	for i, m := range req.Messages {
		if len(m.Value) > n.cfg.MaxMessageBytes {
			return apierr.New(apierr.MessageTooLarge, "message %d: %d bytes exceed %d", i, len(m.Value), n.cfg.MaxMessageBytes)
		}
		if size := coordinator.MetadataBytes(m); size > MaxMetadataBytes {
			return apierr.New(apierr.MessageTooLarge, "message %d: key, headers and message id of %d bytes exceed %d", i, size, MaxMetadataBytes)
		}
		if err := httpapi.ValidateTopicName(m.Topic); err != nil {
			return err
		}
		for _, h := range m.Headers {
			if h.Key == groupcommit.Header {
				return apierr.New(apierr.InvalidArgument, "message %d: header %q is orderlog's; send a group_commit instead", i, h.Key)
			}
		}
	}
	return nil
}

// attachGroupCommit writes a frame's group commit into its last message as
// the groupcommit.Header header, so the commit is logged with the frame's
// messages or not at all. It needs a producer session: a retry of the
// frame is then recognised by its seqs, and the producer's last message
// tells a restarted loop what it committed.
func attachGroupCommit(req *orderlogpb.ProduceRequest) error {
	c := req.GroupCommit
	if c == nil {
		return nil
	}
	switch {
	case req.ProducerId == 0:
		return apierr.New(apierr.InvalidArgument, "a group_commit needs a producer session (producer_id)")
	case c.Group == "" || len(c.Group) > httpapi.MaxGroupNameBytes:
		return apierr.New(apierr.InvalidArgument, "a group_commit needs a group name of 1-%d bytes", httpapi.MaxGroupNameBytes)
	case len(c.Offsets) == 0:
		return apierr.New(apierr.InvalidArgument, "a group_commit needs at least one offset")
	}
	last := req.Messages[len(req.Messages)-1]
	last.Headers = append(last.Headers, &orderlogpb.Header{Key: groupcommit.Header, Value: groupcommit.Encode(c)})
	if size := coordinator.MetadataBytes(last); size > MaxMetadataBytes {
		return apierr.New(apierr.MessageTooLarge, "the last message with its group commit: key, headers and message id of %d bytes exceed %d", size, MaxMetadataBytes)
	}
	return nil
}

// admit asks Config.Admit whether a frame of that many messages may be
// accepted now.
func (n *Node) admit(messages int) error {
	if n.cfg.Admit == nil {
		return nil
	}
	return n.cfg.Admit(messages)
}

// MaxMetadataBytes bounds what one message carries besides its value (see
// coordinator.MaxMetadataBytes).
const MaxMetadataBytes = coordinator.MaxMetadataBytes

// InitProducer registers (or re-registers) a producer by name with this node
// as its owner, fencing older instances, and returns the session once its
// state is settled here and the older instance's in-flight messages are
// logged, with the next seq to send.
func (n *Node) InitProducer(ctx context.Context, name string) (*orderlogpb.InitProducerResponse, error) {
	if err := checkProducerName(name); err != nil {
		return nil, err
	}
	principal, err := n.callerPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	release, err := n.admitProducer(principal, name) // producer_limit.go
	if err != nil {
		return nil, err
	}
	defer release()
	start := time.Now()
	incarnation := n.current().incarnation
	rec, previous, err := registerProducerAs(ctx, n.etcd, name, incarnation, principal)
	if errors.Is(err, errOtherPrincipal) {
		return nil, apierr.New(apierr.PermissionDenied, "producer %q belongs to another principal", name)
	}
	if err != nil {
		return nil, apierr.New(apierr.Unavailable, "register producer: %v", err)
	}
	n.auditFencing(ctx, rec, previous)
	if rec.Owner == incarnation { // else the takeover hands it over from its live owner
		n.ownerChanged(rec, previous.Owner, incarnation, start)
	}
	answer := make(chan coordinator.InitDone, 1)
	var token uint64
	if !n.do(func() {
		if n.reg.incarnation != incarnation { // the lease was lost meanwhile
			answer <- coordinator.InitDone{Err: apierr.New(apierr.Unavailable, "ingest node lost its etcd lease: retry")}
			return
		}
		n.nextInit++
		token = n.nextInit
		n.initWaiters[token] = answer
		n.machine.InitProducer(rec.ID, rec.Epoch, token)
		if rec.Principal != "" { // with the session, so sessionsOf never forgets it as not held
			n.principals.set(rec.ID, rec.Principal, rec.Name)
		}
	}) {
		return nil, apierr.New(apierr.Unavailable, "ingest node is shutting down")
	}
	select {
	case done := <-answer:
		return done.Response, done.Err
	case <-ctx.Done():
		n.do(func() { delete(n.initWaiters, token) })
		return nil, apierr.New(apierr.Timeout, "producer %q not settled yet: %v", name, ctx.Err())
	}
}

// answerInit hands an InitProducer its answer.
func (n *Node) answerInit(done coordinator.InitDone) {
	if waiter, ok := n.initWaiters[done.Token]; ok {
		delete(n.initWaiters, done.Token)
		waiter <- done
	}
}
