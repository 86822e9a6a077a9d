package ingest

import (
	"strings"

	"orderlog/ingest/coordinator"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// maxIdempotencyKeyBytes bounds an Idempotency-Key.
const maxIdempotencyKeyBytes = 256

func validateIdempotencyKey(req *orderlogpb.ProduceRequest) error {
	key := req.IdempotencyKey
	switch {
	case req.ProducerId != 0:
		return apierr.New(apierr.InvalidArgument, "use a producer session or an idempotency key, not both")
	case len(req.Messages) != 1:
		return apierr.New(apierr.InvalidArgument, "an idempotency key names exactly one message; send batches in a producer session")
	case len(key) > maxIdempotencyKeyBytes:
		return apierr.New(apierr.InvalidArgument, "idempotency key of %d bytes exceeds %d", len(key), maxIdempotencyKeyBytes)
	case len(req.Messages[0].MessageId) > 0 && string(req.Messages[0].MessageId) != key:
		return apierr.New(apierr.InvalidArgument, "message_id must be empty or equal to the idempotency key")
	}
	return nil
}

func checkProducerName(name string) error {
	if name == "" {
		return apierr.New(apierr.InvalidArgument, "producer name is required")
	}
	if strings.HasPrefix(name, coordinator.ReservedProducerPrefix) {
		return apierr.New(apierr.InvalidArgument, "producer names starting with %q are reserved", coordinator.ReservedProducerPrefix)
	}
	return nil
}
