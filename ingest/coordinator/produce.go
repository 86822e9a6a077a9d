package coordinator

import (
	"errors"

	"orderlog/ingest/batch"
	"orderlog/ingest/pipeline"
	"orderlog/ingest/producer"
	"orderlog/proto/orderlogpb"
)

// Produce: a frame arrived, already checked against the limits. Its
// messages are queued (a frame without a producer: at least once), held
// until the producer's session is ready, or answered from the dedup window.
func (m *Machine) Produce(f *Frame) {
	req := f.Request
	if req.IdempotencyKey != "" {
		m.produceKeyed(f)
		return
	}
	if req.ProducerId == 0 { // at-least-once: no sequence check, no dedup
		refs := make([]MessageRef, len(req.Messages))
		for i, msg := range req.Messages {
			refs[i] = MessageRef{Frame: f, Index: i, Record: batch.FromProto(msg)}
			m.pipe.Add(pipeline.Message{Size: RecordBytes(msg), Payload: &refs[i]})
			f.unlogged++
		}
		return
	}
	s := m.session(req.ProducerId, req.Epoch)
	s.lastActive = m.now
	if !s.ready {
		s.held = append(s.held, f)
		return
	}
	m.produceOwned(f)
}

// produceOwned checks a frame of a ready producer against its sequence
// state, answers duplicates and queues the new messages.
func (m *Machine) produceOwned(f *Frame) {
	req := f.Request
	if s := m.producers[req.ProducerId]; s != nil && s.releasing {
		m.refuse(f, movedError(req.ProducerId))
		return
	}
	decision, err := m.table.Check(req.ProducerId, req.Epoch, req.FirstSeq, len(req.Messages))
	if err != nil {
		var refusal *producer.RefusalError
		if errors.As(err, &refusal) {
			err = refusalError(refusal)
		}
		m.refuse(f, err)
		return
	}
	refs := make([]MessageRef, len(req.Messages)) // one allocation for the frame's messages
	for i, msg := range req.Messages {
		seq := req.FirstSeq + uint64(i)
		if seq >= decision.AcceptFrom {
			refs[i] = MessageRef{Frame: f, Index: i, Record: batch.FromProto(msg)}
			m.pipe.Add(pipeline.Message{ProducerID: req.ProducerId, Epoch: req.Epoch, Seq: seq, Size: RecordBytes(msg),
				Payload: &refs[i]})
			f.unlogged++
			continue
		}
		switch verdict, offset := m.table.Lookup(req.ProducerId, seq); verdict {
		case producer.Duplicate:
			m.ack(f, i, &orderlogpb.Ack{Offset: offset, Duplicate: true})
		case producer.DuplicateWithoutOffset:
			m.ack(f, i, &orderlogpb.Ack{Duplicate: true, DuplicateWithoutOffset: true})
		default: // in flight: answer when it is logged
			key := seqKey{req.ProducerId, seq}
			m.dupWaiters[key] = append(m.dupWaiters[key], ackTarget{f, i})
		}
	}
}

// ackEarly records the offsets of a batch this node's own store fsynced
// (ack mode leader). Producer state moves only when it is logged; its later
// acks find the messages answered and change nothing.
func (m *Machine) ackEarly(b *pipeline.Batch) {
	for i, msg := range b.Messages {
		ref := msg.Payload.(*MessageRef)
		if ref.Frame.Request.Ack == orderlogpb.AckMode_ACK_MODE_REPLICATED {
			continue // acknowledged once logged
		}
		m.ackOffset(ref.Frame, ref.Index, b.First+uint64(i))
	}
}

// logged acknowledges a durable batch and advances producer state.
func (m *Machine) logged(b *pipeline.Batch) {
	for start := 0; start < len(b.Messages); {
		msg := b.Messages[start]
		end := start + 1
		for end < len(b.Messages) && b.Messages[end].ProducerID == msg.ProducerID && b.Messages[end].Seq == b.Messages[end-1].Seq+1 {
			end++
		}
		if msg.ProducerID != 0 {
			offsets := make([]uint64, end-start)
			for i := range offsets {
				offsets[i] = b.First + uint64(start+i)
			}
			if err := m.table.Durable(msg.ProducerID, msg.Seq, offsets); err != nil {
				panic("coordinator: " + err.Error()) // the pipeline keeps producer order: a bug
			}
		}
		start = end
	}
	for i, msg := range b.Messages {
		offset := b.First + uint64(i)
		ref := msg.Payload.(*MessageRef)
		ref.Frame.unlogged--
		m.ackOffset(ref.Frame, ref.Index, offset)
		if msg.ProducerID == 0 {
			continue
		}
		m.keyLogged(msg.ProducerID, msg.Seq, offset)
		key := seqKey{msg.ProducerID, msg.Seq}
		for _, w := range m.dupWaiters[key] {
			m.ack(w.frame, w.index, &orderlogpb.Ack{Offset: offset, Duplicate: true})
		}
		delete(m.dupWaiters, key)
	}
	for _, msg := range b.Messages {
		m.releaseIfDone(msg.Payload.(*MessageRef).Frame)
	}
}

// MaxMetadataBytes bounds what one message carries besides its value: its
// key, its headers' keys and values, and its message id. Without a bound a
// reader's page, which holds whole messages, could not be kept under
// gRPC's message limit.
const MaxMetadataBytes = 64 << 10

// MetadataBytes is what a message's key, headers and message id take in a
// batch, a few bytes of framing per header included (so that many empty
// headers count too).
func MetadataBytes(msg *orderlogpb.Message) int {
	const headerFraming = 4
	size := len(msg.Key) + len(msg.MessageId)
	for _, h := range msg.Headers {
		size += len(h.Key) + len(h.Value) + headerFraming
	}
	return size
}

// RecordBytes is what a message adds to a batch, near enough (docs/format/
// batch.md): the batch byte limit counts it all, or batches of small
// values with big keys grew past what a ledger entry may hold.
func RecordBytes(msg *orderlogpb.Message) int {
	const recordFraming = 32
	return len(msg.Value) + len(msg.Topic) + MetadataBytes(msg) + recordFraming
}
