package ingest

import (
	"errors"
	"time"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
	"orderlog/schema"
)

// checkSchemas applies the topics' schema validation to a frame before
// any of it is queued: in strict mode one message that does not match
// refuses the whole frame (SCHEMA_MISMATCH, naming the message and why),
// so nothing of it is logged; in warn mode the mismatch is counted and
// logged, and the message is logged as sent.
func (n *Node) checkSchemas(messages []*orderlogpb.Message) error {
	if n.cfg.Schemas == nil {
		return nil
	}
	for i, m := range messages {
		mode, err := n.cfg.Schemas.Check(m.Topic, m.SchemaId, m.Value)
		if err == nil || mode == schema.ValidateNone {
			continue
		}
		var mismatch *schema.MismatchError
		switch {
		case mode == schema.ValidateStrict && errors.As(err, &mismatch):
			return apierr.New(apierr.SchemaMismatch, "message %d of topic %q: %s", i, m.Topic, mismatch.Reason)
		case mode == schema.ValidateStrict:
			return err // the registry could not be read: the client retries
		case !errors.As(err, &mismatch):
			// warn, and the registry could not be read: log the frame
			// unchecked rather than wait for etcd once per message.
			n.warnSchemaMismatch(m.Topic, err)
			return nil
		default:
			n.metrics.schemaWarnings.Inc()
			n.warnSchemaMismatch(m.Topic, err)
		}
	}
	return nil
}

// schemaWarnEvery bounds the log lines of validation warn: a producer
// that sends only mismatches must not flood the log.
const schemaWarnEvery = 10 * time.Second

func (n *Node) warnSchemaMismatch(topic string, err error) {
	now := time.Now().UnixNano()
	last := n.lastSchemaWarn.Load()
	if now-last < int64(schemaWarnEvery) || !n.lastSchemaWarn.CompareAndSwap(last, now) {
		return
	}
	n.logger.Warn("ingest: a message not checked against, or not matching, its topic's schema; logged anyway (validation warn)",
		"topic", topic, "err", err, "counted_in", "orderlog_ingest_schema_warnings_total")
}
