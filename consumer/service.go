package consumer

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
	"orderlog/reader"
)

// Service is the Consumer gRPC service of one node.
type Service struct {
	orderlogpb.UnimplementedConsumerServer
	store        *Store
	coord        *Coordinator
	reader       *reader.Reader
	node         string
	defaultTopic string
	logger       *slog.Logger
	logged       loggedCommits
	// life ends when the node stops: work a member's departure leaves
	// (a reconcile, logged commits) ends with it.
	life           context.Context
	describeAccess func(ctx context.Context, topics []string) error
}

// Config is what a Service needs.
type Config struct {
	Etcd   *clientv3.Client
	Reader *reader.Reader
	// Partitions is a topic's partition count (UNKNOWN_TOPIC if none).
	Partitions func(ctx context.Context, topic string) (uint32, error)
	// Node names this node in member records.
	Node string
	// DefaultTopic replaces an empty topic name.
	DefaultTopic string
	Logger       *slog.Logger
	// Context is the service's lifetime (nil: forever).
	Context context.Context
	// DescribeAccess, if set, decides whether the caller may see a
	// group's description, given every topic it names (none for a group
	// without topics): a group has no ACL of its own, and its offsets and
	// members tell of its topics.
	DescribeAccess func(ctx context.Context, topics []string) error
}

// NewService returns the service.
func NewService(cfg Config) *Service {
	logger := cmp.Or(cfg.Logger, slog.Default())
	store := NewStore(cfg.Etcd, cfg.Partitions)
	life := cfg.Context
	if life == nil {
		life = context.Background()
	}
	return &Service{store: store, coord: NewCoordinator(store, logger), reader: cfg.Reader, node: cfg.Node,
		defaultTopic: cfg.DefaultTopic, logger: logger, life: life, describeAccess: cfg.DescribeAccess}
}

// Register adds the service to a gRPC server.
func (s *Service) Register(srv *grpc.Server) { orderlogpb.RegisterConsumerServer(srv, s) }

// Consume serves one member: it joins the group, receives assignments and
// messages, and commits on the stream; it leaves when the stream ends.
func (s *Service) Consume(stream grpc.BidiStreamingServer[orderlogpb.ConsumeRequest, orderlogpb.ConsumeResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	return s.Serve(stream.Context(), first.GetJoin(), stream.Recv, stream.Send)
}

// Serve is one member's membership, for any front end: join joins; recv
// returns the member's further requests (commits) and an error when the
// member is gone; send carries assignments, batches and commit results
// (Serve calls it from one goroutine at a time). It returns when ctx ends,
// recv fails, or the membership ends.
func (s *Service) Serve(ctx context.Context, join *orderlogpb.JoinGroup, recv func() (*orderlogpb.ConsumeRequest, error),
	send func(*orderlogpb.ConsumeResponse) error) error {
	timeout, err := validateJoin(join)
	if err != nil {
		return err
	}
	topics := make([]string, len(join.Topics))
	for i, t := range join.Topics {
		topics[i] = cmp.Or(t, s.defaultTopic)
		if _, err := s.store.counts(ctx, topics[i]); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var sendMu sync.Mutex
	returned := false // after Serve returns, the front end's stream is gone
	defer func() {
		sendMu.Lock()
		returned = true
		sendMu.Unlock()
	}()
	sess := &session{svc: s, group: join.Group, start: cmp.Or(join.Start, StartEarliest),
		member: Member{ID: newMemberID(join.ClientName), ClientName: join.ClientName, Topics: sortedTopics(topics), Node: s.node},
		send: func(resp *orderlogpb.ConsumeResponse) error {
			sendMu.Lock()
			defer sendMu.Unlock()
			if returned {
				return context.Canceled
			}
			return send(resp)
		}}
	lease, err := s.store.join(ctx, join.Group, sess.member, timeout)
	if err != nil {
		return err
	}
	defer func() {
		// After the session's watch is released: the group gets its next
		// generation even when this was its last member here (or anywhere).
		s.store.leave(s.life, lease)
		rctx, cancel := context.WithTimeout(s.life, 3*time.Second)
		defer cancel()
		if _, _, err := s.store.reconcile(rctx, join.Group); err != nil {
			s.logger.Warn("consumer group: reconcile after a member left", "group", join.Group, "err", err)
		}
	}()
	s.logger.Info("consumer joined", "group", join.Group, "member", sess.member.ID, "topics", sess.member.Topics)
	defer s.logger.Info("consumer left", "group", join.Group, "member", sess.member.ID)
	go s.keepAlive(ctx, cancel, lease)
	go s.receiveCommits(ctx, cancel, recv, sess)
	err = sess.run(ctx)
	if cause := context.Cause(ctx); cause != nil && cause != context.Canceled {
		return cause
	}
	return err
}

// keepAlive renews the member's lease while the stream lasts; if renewal
// stops (etcd unreachable for longer than the lease), the member has left
// and the stream ends.
func (s *Service) keepAlive(ctx context.Context, cancel context.CancelCauseFunc, lease clientv3.LeaseID) {
	renewals, err := s.store.etcd.KeepAlive(ctx, lease)
	if err != nil {
		cancel(apierr.New(apierr.Unavailable, "keep the member's lease: %v", err))
		return
	}
	for range renewals {
	}
	if ctx.Err() == nil {
		cancel(apierr.New(apierr.Unavailable, "the member's lease ended: join again"))
	}
}

// receiveCommits stores the commits the member sends on its stream, in
// order, and answers each.
func (s *Service) receiveCommits(ctx context.Context, cancel context.CancelCauseFunc,
	recv func() (*orderlogpb.ConsumeRequest, error), sess *session) {
	for {
		req, err := recv()
		if err != nil {
			cancel(nil) // the client closed or went away: leave
			return
		}
		c := req.GetCommit()
		if c == nil {
			cancel(apierr.New(apierr.InvalidArgument, "after the JoinGroup a Consume stream carries commits only"))
			return
		}
		c.Group, c.MemberId = sess.group, sess.member.ID
		result := &orderlogpb.CommitResult{RequestId: req.RequestId}
		if err := s.store.commit(ctx, c); err != nil {
			e := apierr.As(err)
			result.ErrorCode, result.ErrorMessage = string(e.Code), e.Message
		}
		if err := sess.send(&orderlogpb.ConsumeResponse{Response: &orderlogpb.ConsumeResponse_Commit{Commit: result}}); err != nil {
			cancel(nil)
			return
		}
	}
}

// CommitOffsets stores a member's commit outside a stream.
func (s *Service) CommitOffsets(ctx context.Context, c *orderlogpb.GroupCommit) (*orderlogpb.CommitOffsetsResponse, error) {
	if err := s.store.commit(ctx, c); err != nil {
		return nil, err
	}
	return &orderlogpb.CommitOffsetsResponse{}, nil
}

// ApplyLoggedCommit stores, in the background, the commit a logged
// producer frame carried (exactly-once loops): offsets move forward only,
// and a commit whose generation is over is skipped. Commits are coalesced:
// one writer drains them, keeping only the latest offset per partition,
// so a high frame rate costs neither a goroutine nor etcd round trips per
// frame.
func (s *Service) ApplyLoggedCommit(c *orderlogpb.GroupCommit) {
	s.logged.mu.Lock()
	defer s.logged.mu.Unlock()
	if s.logged.pending == nil {
		s.logged.pending = map[loggedKey]*orderlogpb.GroupCommit{}
	}
	k := loggedKey{c.Group, c.MemberId, c.Generation}
	if prev, ok := s.logged.pending[k]; ok {
		c = mergeCommits(prev, c)
	}
	s.logged.pending[k] = c
	if !s.logged.draining {
		s.logged.draining = true
		go s.drainLogged()
	}
}

// loggedCommits are the logged commits not stored yet, by group, member
// and generation.
type loggedCommits struct {
	mu       sync.Mutex
	pending  map[loggedKey]*orderlogpb.GroupCommit
	draining bool
}

type loggedKey struct {
	group, member string
	generation    uint64
}

// mergeCommits is a and b with the greater offset of each partition.
func mergeCommits(a, b *orderlogpb.GroupCommit) *orderlogpb.GroupCommit {
	out := &orderlogpb.GroupCommit{Group: a.Group, MemberId: a.MemberId, Generation: a.Generation}
	best := map[TopicPartition]uint64{}
	var order []TopicPartition
	for _, c := range []*orderlogpb.GroupCommit{a, b} {
		for _, o := range c.Offsets {
			tp := TopicPartition{o.Topic, o.Partition}
			if _, seen := best[tp]; !seen {
				order = append(order, tp)
			}
			best[tp] = max(best[tp], o.Offset)
		}
	}
	for _, tp := range order {
		out.Offsets = append(out.Offsets, &orderlogpb.PartitionOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: best[tp]})
	}
	return out
}

// drainLogged stores pending logged commits until none is left.
func (s *Service) drainLogged() {
	for {
		s.logged.mu.Lock()
		batch := s.logged.pending
		s.logged.pending = nil
		if len(batch) == 0 {
			s.logged.draining = false
			s.logged.mu.Unlock()
			return
		}
		s.logged.mu.Unlock()
		for _, c := range batch {
			ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
			if err := s.store.commitFromLog(ctx, c); err != nil && s.life.Err() == nil {
				s.logger.Warn("consumer group: store a logged commit", "group", c.Group, "err", err)
			}
			cancel()
		}
	}
}
