package batch

import (
	"errors"
	"fmt"
)

// Version is the format version this package writes.
const Version = 1

// Kind says what an entry payload holds.
type Kind uint8

const (
	// KindRecords is a batch of produced messages.
	KindRecords Kind = 1
)

// flagSchemaIDs, in a records batch's byte 2, says that every record ends
// with its schema id. It is set exactly when some record has one, so a
// batch has one encoding, and a batch without schema ids is byte for byte
// what it was before they were added.
const flagSchemaIDs = 1

// headerFixedSize is version, kind, reserved, first offset, count, ingest time.
const headerFixedSize = 1 + 1 + 2 + 8 + 4 + 8

// ErrCorrupt is returned when bytes are not a well-formed batch.
var ErrCorrupt = errors.New("batch: corrupt payload")

// ErrVersion is returned for a batch written by an unknown format version.
var ErrVersion = errors.New("batch: unsupported version")

// ProducerRun names Count consecutive records of one producer, whose
// sequence numbers are FirstSeq, FirstSeq+1, ...
type ProducerRun struct {
	ProducerID uint64 // 0 for messages sent without a producer session
	Epoch      uint64
	FirstSeq   uint64
	Count      uint32
}

// Header is everything before the records.
type Header struct {
	Kind             Kind
	FirstOffset      uint64
	Count            uint32
	IngestTimeMicros int64
	Runs             []ProducerRun
}

// EndOffset is the exclusive end of the batch's offset range.
func (h Header) EndOffset() uint64 { return h.FirstOffset + uint64(h.Count) }

// MessageHeader is one user header; order and repeats are kept.
type MessageHeader struct {
	Key   string
	Value []byte
}

// Record is one message.
type Record struct {
	Topic            string
	Key              []byte
	Value            []byte
	Headers          []MessageHeader
	ClientTimeMicros int64
	MessageID        []byte
	SchemaID         uint32 // the registry's global schema id; 0 = none
}

func (h Header) validate() error {
	var sum uint64
	for _, run := range h.Runs {
		if run.Count == 0 {
			return fmt.Errorf("%w: empty producer run", ErrCorrupt)
		}
		sum += uint64(run.Count)
	}
	if sum != uint64(h.Count) {
		return fmt.Errorf("%w: producer runs cover %d records, header says %d", ErrCorrupt, sum, h.Count)
	}
	return nil
}
