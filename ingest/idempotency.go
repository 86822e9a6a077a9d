package ingest

import (
	"cmp"
	"strings"

	"orderlog/ingest/coordinator"
	"orderlog/ingest/httpapi"
	"orderlog/ingest/producer"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

func validateIdempotencyKey(req *orderlogpb.ProduceRequest) error {
	key := req.IdempotencyKey
	switch {
	case req.ProducerId != 0:
		return apierr.New(apierr.InvalidArgument, "use a producer session or an idempotency key, not both")
	case len(req.Messages) != 1:
		return apierr.New(apierr.InvalidArgument, "an idempotency key names exactly one message; send batches in a producer session")
	case len(key) > httpapi.MaxIdempotencyKeyBytes:
		return apierr.New(apierr.InvalidArgument, "idempotency key of %d bytes exceeds %d", len(key), httpapi.MaxIdempotencyKeyBytes)
	case len(req.Messages[0].MessageId) > 0 && string(req.Messages[0].MessageId) != key:
		return apierr.New(apierr.InvalidArgument, "message_id must be empty or equal to the idempotency key")
	}
	return nil
}

func checkProducerName(name string) error {
	if err := httpapi.ValidateProducerName(name); err != nil {
		return err
	}
	if strings.HasPrefix(name, coordinator.ReservedProducerPrefix) {
		return apierr.New(apierr.InvalidArgument, "producer names starting with %q are reserved", coordinator.ReservedProducerPrefix)
	}
	return nil
}

// IdempotencyWindow is how many keys each Idempotency-Key bucket remembers,
// and how many buckets there are.
func (n *Node) IdempotencyWindow() (keysPerBucket, buckets int) {
	return cmp.Or(n.cfg.DedupWindow, producer.DefaultWindowSize), coordinator.IdempotencyBuckets
}
