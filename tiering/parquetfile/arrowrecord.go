package parquetfile

import (
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"

	"orderlog/proto/orderlogpb"
)

// The archive's rows as Arrow, for the read APIs that answer in Arrow (an
// Arrow IPC stream over HTTP, Arrow Flight): the same columns, types and
// values as a file's rows (docs/format/archive.md, "Schema"), built by the
// writer's own rowBuilder, so an Arrow read and a file cannot disagree.

// ArrowSchema is the archive's Arrow schema: the columns of an archive
// file, in order. It is shared: derive a schema with metadata from its
// Fields rather than change it.
func ArrowSchema() *arrow.Schema { return archiveSchema }

// NewArrowRecord returns msgs as one record batch of ArrowSchema, one row
// per message in the order given, schema_version null (a read does not
// resolve it; schema_id is the message's) (any offsets: holes are the caller's to
// report). It returns ErrInvalidMessage, and no batch, for a message the
// format cannot hold. The caller releases the batch.
func NewArrowRecord(msgs []*orderlogpb.StoredMessage) (arrow.RecordBatch, error) {
	for _, m := range msgs {
		if err := checkRow(m); err != nil {
			return nil, err
		}
	}
	rows := newRowBuilder()
	defer rows.release()
	for _, m := range msgs {
		rows.append(m, 0)
	}
	return rows.newRecord(), nil
}

// checkRow returns why m cannot be a row whatever its offset, or nil: the
// message-level half of Writer.check (which adds the file's range and
// order).
func checkRow(m *orderlogpb.StoredMessage) error {
	if m == nil || m.GetMessage() == nil {
		return fmt.Errorf("%w: no message", ErrInvalidMessage)
	}
	o := m.GetOffset()
	switch {
	case o >= math.MaxInt64:
		return fmt.Errorf("%w: offset %d does not fit log_offset", ErrInvalidMessage, o)
	case m.GetProducerId() > math.MaxInt64 || m.GetProducerSeq() > math.MaxInt64:
		return fmt.Errorf("%w: offset %d: producer id %d or sequence %d above 2^63-1",
			ErrInvalidMessage, o, m.GetProducerId(), m.GetProducerSeq())
	case !utf8.ValidString(m.GetMessage().GetTopic()):
		return fmt.Errorf("%w: offset %d: topic is not UTF-8", ErrInvalidMessage, o)
	}
	for _, h := range m.GetMessage().GetHeaders() {
		if !utf8.ValidString(h.GetKey()) {
			return fmt.Errorf("%w: offset %d: header key is not UTF-8", ErrInvalidMessage, o)
		}
	}
	return nil
}
