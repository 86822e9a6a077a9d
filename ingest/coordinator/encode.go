package coordinator

import (
	"slices"

	"orderlog/ingest/batch"
	"orderlog/ingest/pipeline"
)

// Encoder builds the entry payload of a granted batch (docs/format/
// batch.md). Its records and runs are scratch space reused batch after
// batch: Encode copies everything into the payload. Not safe for
// concurrent use.
type Encoder struct {
	records []batch.Record
	runs    []batch.ProducerRun
}

// Encode encodes b into buffer(size bound) (nil: a new slice), stamped with
// ingestTimeMicros.
func (e *Encoder) Encode(b *pipeline.Batch, ingestTimeMicros int64, buffer func(size int) []byte) ([]byte, error) {
	records := slices.Grow(e.records[:0], len(b.Messages))[:len(b.Messages)]
	runs := e.runs[:0]
	defer func() {
		clear(records) // keep no message alive through the scratch space
		e.records, e.runs = records[:0], runs[:0]
	}()
	for i, m := range b.Messages {
		records[i] = m.Payload.(*MessageRef).Record
		last := len(runs) - 1
		if last >= 0 && runs[last].ProducerID == m.ProducerID && runs[last].Epoch == m.Epoch &&
			(m.ProducerID == 0 || runs[last].FirstSeq+uint64(runs[last].Count) == m.Seq) {
			runs[last].Count++
			continue
		}
		runs = append(runs, batch.ProducerRun{ProducerID: m.ProducerID, Epoch: m.Epoch, FirstSeq: m.Seq, Count: 1})
	}
	header := batch.Header{Kind: batch.KindRecords, FirstOffset: b.First, Count: uint32(len(records)),
		IngestTimeMicros: ingestTimeMicros, Runs: runs}
	var dst []byte
	if buffer != nil {
		dst = buffer(batch.EncodedSizeBound(header, records))
	}
	return batch.Encode(dst, header, records)
}
