package node

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"orderlog/ingest"
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
}

func newService(etcd *clientv3.Client, in *ingest.Node, rd *reader.Reader, status func(context.Context) (*orderlogpb.StatusResponse, error)) *service {
	return &service{etcd: etcd, ingest: in, reader: rd, status: status}
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
	filter := reader.Filter{Topic: req.Topic, Key: req.Key, FromTimeMicros: req.FromTimeUs, ToTimeMicros: req.ToTimeUs}
	return s.reader.ReadPage(ctx, req.FromOffset, int(req.Limit), filter)
}

func (s *service) Status(ctx context.Context, _ *orderlogpb.StatusRequest) (*orderlogpb.StatusResponse, error) {
	return s.status(ctx)
}

func (s *service) CreateTopic(ctx context.Context, req *orderlogpb.CreateTopicRequest) (*orderlogpb.Topic, error) {
	if err := ingest.CreateTopic(ctx, s.etcd, req.Name, req.Config); err != nil {
		return nil, err
	}
	return &orderlogpb.Topic{Name: req.Name, Config: req.Config}, nil
}

func (s *service) ListTopics(ctx context.Context, _ *orderlogpb.ListTopicsRequest) (*orderlogpb.ListTopicsResponse, error) {
	topics, err := ingest.ListTopics(ctx, s.etcd)
	if err != nil {
		return nil, err
	}
	return &orderlogpb.ListTopicsResponse{Topics: topics}, nil
}

// httpService adapts service to httpapi.Service (whose Status and topic
// calls take plain arguments). cutOff (nil without the ingest role) says
// why the node cannot own producers now: their calls are then refused
// (cutoff.go).
type httpService struct {
	*service
	cutOff func() error
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

func (h httpService) CreateTopic(ctx context.Context, name string, config *orderlogpb.TopicConfig) error {
	return ingest.CreateTopic(ctx, h.etcd, name, config)
}

func (h httpService) ListTopics(ctx context.Context) ([]string, error) {
	topics, err := ingest.ListTopics(ctx, h.etcd)
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Name
	}
	return names, err
}
