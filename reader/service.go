package reader

import (
	"context"

	"google.golang.org/grpc"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// MaxReadLimit bounds the limit of one Read or Query call.
const MaxReadLimit = 1_000_000

// Service is the Reader gRPC service over a Reader.
type Service struct {
	orderlogpb.UnimplementedReaderServer
	reader *Reader
	// partition narrows a filter to virtual partition p of topic (it knows
	// the topics' partition counts); nil: a Query by partition is refused.
	partition func(ctx context.Context, topic string, p uint32, f *Filter) error
}

// NewService returns the gRPC service; partition narrows a Query to a
// virtual partition (nil: queries by partition are refused).
func NewService(r *Reader, partition func(ctx context.Context, topic string, p uint32, f *Filter) error) *Service {
	return &Service{reader: r, partition: partition}
}

// Register adds the service to a gRPC server.
func (s *Service) Register(srv *grpc.Server) { orderlogpb.RegisterReaderServer(srv, s) }

// Read streams [from_offset, C) (C as of the call), at most limit messages.
func (s *Service) Read(req *orderlogpb.ReadRequest, stream grpc.ServerStreamingServer[orderlogpb.ReadResponse]) error {
	if err := checkLimit(req.Limit); err != nil {
		return err
	}
	return s.reader.Stream(stream.Context(), req.FromOffset, int(req.Limit), Filter{}, false, stream.Send)
}

// Tail streams from from_offset on, following C, until the client leaves.
func (s *Service) Tail(req *orderlogpb.TailRequest, stream grpc.ServerStreamingServer[orderlogpb.ReadResponse]) error {
	return s.reader.Stream(stream.Context(), req.FromOffset, 0, Filter{}, true, stream.Send)
}

// Query is Read with topic, key and ingest-time filters, in global order.
func (s *Service) Query(req *orderlogpb.QueryRequest, stream grpc.ServerStreamingServer[orderlogpb.ReadResponse]) error {
	if err := checkLimit(req.Limit); err != nil {
		return err
	}
	filter := Filter{Topic: req.Topic, Key: req.Key, FromTimeMicros: req.FromTimeUs, ToTimeMicros: req.ToTimeUs, ProducerID: req.ProducerId}
	if req.Partition != nil {
		if s.partition == nil {
			return apierr.New(apierr.InvalidArgument, "this reader cannot select a partition")
		}
		if err := s.partition(stream.Context(), req.Topic, *req.Partition, &filter); err != nil {
			return err
		}
	}
	return s.reader.Stream(stream.Context(), req.FromOffset, int(req.Limit), filter, false, stream.Send)
}

func checkLimit(limit uint32) error {
	if limit > MaxReadLimit {
		return apierr.New(apierr.LimitTooLarge, "limit %d exceeds the maximum %d", limit, MaxReadLimit)
	}
	return nil
}
