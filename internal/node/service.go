package node

import (
	"cmp"
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"orderlog/ingest"
	"orderlog/ingest/httpapi"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
	"orderlog/reader"
)

// Version is reported by Status.
const Version = "0.1.0-dev"

// service is the logic behind both front ends (gRPC Admin and the HTTP
// API): it delegates to the ingest node and the reader.
type service struct {
	orderlogpb.UnimplementedAdminServer
	etcd   *clientv3.Client
	ingest *ingest.Node
	reader *reader.Reader
	status func(ctx context.Context) (*orderlogpb.StatusResponse, error)
	topics *ingest.Topics // partition counts, for reads by partition
}

func newService(etcd *clientv3.Client, in *ingest.Node, rd *reader.Reader, status func(context.Context) (*orderlogpb.StatusResponse, error)) *service {
	return &service{etcd: etcd, ingest: in, reader: rd, status: status, topics: ingest.NewTopics(etcd)}
}

func (s *service) register(srv *grpc.Server) { orderlogpb.RegisterAdminServer(srv, s) }

// errNoRole answers calls for a role this process does not run.
func errNoRole(role string) error {
	return apierr.New(apierr.Unavailable, "this orderlog process runs no %s role", role)
}

func (s *service) InitProducer(ctx context.Context, req *orderlogpb.InitProducerRequest) (*orderlogpb.InitProducerResponse, error) {
	if s.ingest == nil {
		return nil, errNoRole("ingest")
	}
	return s.ingest.InitProducer(ctx, req.Name)
}

func (s *service) Produce(ctx context.Context, req *orderlogpb.ProduceRequest) ([]*orderlogpb.Ack, error) {
	if s.ingest == nil {
		return nil, errNoRole("ingest")
	}
	return s.ingest.ProduceSync(ctx, req)
}

func (s *service) Query(ctx context.Context, req *orderlogpb.QueryRequest) (*orderlogpb.ReadResponse, error) {
	if s.reader == nil {
		return nil, errNoRole("reader")
	}
	filter := reader.Filter{Topic: req.Topic, Key: req.Key, FromTimeMicros: req.FromTimeUs, ToTimeMicros: req.ToTimeUs,
		ProducerID: req.ProducerId}
	if req.Partition != nil {
		if err := s.partitionFilter(ctx, req.Topic, *req.Partition, &filter); err != nil {
			return nil, err
		}
	}
	return s.reader.ReadPage(ctx, req.FromOffset, int(req.Limit), filter)
}

// partitionFilter narrows filter to one virtual partition of topic (the
// default topic if empty).
func (s *service) partitionFilter(ctx context.Context, topic string, p uint32, filter *reader.Filter) error {
	topic = cmp.Or(topic, httpapi.DefaultTopic)
	n, err := s.partitions(ctx, topic)
	if err != nil {
		return err
	}
	if p >= n {
		return apierr.New(apierr.InvalidArgument, "partition %d: topic %q has partitions 0 to %d", p, topic, n-1)
	}
	filter.Topic, filter.Partition, filter.Partitions = topic, p, n
	return nil
}

// partitions is a topic's partition count: UNKNOWN_TOPIC for a topic that
// does not exist, except the default topic, which is created on first use
// by a read as by a produce.
func (s *service) partitions(ctx context.Context, topic string) (uint32, error) {
	if err := httpapi.ValidateTopicName(topic); err != nil {
		return 0, err
	}
	if topic == httpapi.DefaultTopic {
		return s.topics.Ensure(ctx, topic)
	}
	return s.topics.Partitions(ctx, topic)
}

// ListPartitions lists a topic's virtual partitions. Every partition is a
// sub-sequence of the one log, so each has the log's bounds: its readable
// messages lie in [log start, C). Per-partition message counts would need
// a scan of the log; they are not given.
func (s *service) ListPartitions(ctx context.Context, req *orderlogpb.ListPartitionsRequest) (*orderlogpb.ListPartitionsResponse, error) {
	topic := cmp.Or(req.Topic, httpapi.DefaultTopic)
	n, err := s.partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	resp := &orderlogpb.ListPartitionsResponse{Topic: topic}
	if s.reader != nil {
		_, resp.Committed = s.reader.Commits().Committed()
		resp.LogStart = s.reader.ReadStart()
	} else if st, err := s.status(ctx); err == nil {
		resp.Committed, resp.LogStart = st.Committed, st.LogStart
	} else {
		return nil, err
	}
	resp.Partitions = make([]*orderlogpb.PartitionInfo, n)
	for i := range resp.Partitions {
		resp.Partitions[i] = &orderlogpb.PartitionInfo{Partition: uint32(i), EndOffset: resp.Committed}
	}
	return resp, nil
}

func (s *service) Status(ctx context.Context, _ *orderlogpb.StatusRequest) (*orderlogpb.StatusResponse, error) {
	return s.status(ctx)
}

func (s *service) CreateTopic(ctx context.Context, req *orderlogpb.CreateTopicRequest) (*orderlogpb.Topic, error) {
	return ingest.CreateTopic(ctx, s.etcd, req)
}

func (s *service) ListTopics(ctx context.Context, _ *orderlogpb.ListTopicsRequest) (*orderlogpb.ListTopicsResponse, error) {
	topics, err := ingest.ListTopics(ctx, s.etcd)
	if err != nil {
		return nil, err
	}
	return &orderlogpb.ListTopicsResponse{Topics: topics}, nil
}

// httpService adapts service to httpapi.Service (whose Status and
// ListTopics calls take plain arguments). cutOff (nil without the ingest role) says
// why the node cannot own producers now: their calls are then refused
// (cutoff.go).
type httpService struct {
	*service
	cutOff func() error
	// guard checks the calls' ACLs (auth_http.go).
	guard *authGuard
}

func (h httpService) InitProducer(ctx context.Context, req *orderlogpb.InitProducerRequest) (*orderlogpb.InitProducerResponse, error) {
	return whileConnected(ctx, h.cutOff, func(ctx context.Context) (*orderlogpb.InitProducerResponse, error) {
		return h.service.InitProducer(ctx, req)
	})
}

func (h httpService) Produce(ctx context.Context, req *orderlogpb.ProduceRequest) ([]*orderlogpb.Ack, error) {
	return whileConnected(ctx, h.cutOff, func(ctx context.Context) ([]*orderlogpb.Ack, error) {
		return h.service.Produce(ctx, req)
	})
}

func (h httpService) Status(ctx context.Context) (*orderlogpb.StatusResponse, error) {
	return h.service.status(ctx)
}

func (h httpService) IdempotencyWindow() (keysPerBucket, buckets int) {
	if h.ingest == nil {
		return 0, 0
	}
	return h.ingest.IdempotencyWindow()
}

func (h httpService) ListTopics(ctx context.Context) ([]*orderlogpb.Topic, error) {
	return ingest.ListTopics(ctx, h.etcd)
}
