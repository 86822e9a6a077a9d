package node

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/ingest/ledger"
	"orderlog/ingest/retention"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
	"orderlog/sequencer"
)

// TestRollingAndRetentionBoundTheLog: with small roll and retention
// thresholds, a node that logs 40 times the retained bytes rolls its
// ledger many times, moves the log start, deletes the ledgers below it
// (records and copies: the journal shrinks), answers a read below the
// start with OFFSET_OUT_OF_RANGE naming the start, serves everything
// from the start exactly as acknowledged, and keeps the producer's
// exactly-once state across a restart after its old ledgers are gone.
func TestRollingAndRetentionBoundTheLog(t *testing.T) {
	dir := t.TempDir()
	const retained = 256 << 10
	cfg := Config{DataDir: dir, Ingest: ingest.Config{RollBytes: 64 << 10}, SegmentSize: 256 << 10,
		Checkpoint: sequencer.CheckpointConfig{Records: 200},
		Retention:  RetentionConfig{Policy: retention.Policy{Bytes: retained}, Interval: 50 * time.Millisecond, DeleteGrace: -1}}
	s := startServerWith(t, cfg)
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := c.NewProducer(ctx, "svc", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	value := bytes.Repeat([]byte{'v'}, 1000)
	acked := map[uint64]string{} // offset → value
	var last *orderlogpb.Ack
	for i := range 2500 { // about 10 MiB in 4-message frames
		var frame []*orderlogpb.Message
		for j := range 4 {
			v := fmt.Sprintf("%06d.%d|%s", i, j, value)
			frame = append(frame, &orderlogpb.Message{Topic: "t", Value: []byte(v)})
		}
		acks, err := p.Produce(ctx, frame...)
		if err != nil {
			t.Fatal(err)
		}
		for j, a := range acks {
			acked[a.Offset] = string(frame[j].Value)
		}
		last = acks[len(acks)-1]
	}
	id, epoch := p.ID()
	p.Close()
	waitCommitted(t, c, last.Offset+1)
	// Each roll's ledger was settled by its writer's reports before its
	// close arrived: none was read back for its spans.
	if settled, readBack := s.sequencer.WriterCloses(); settled < 10 || readBack != 0 {
		t.Errorf("writer closes: %d settled, %d read back; want many rolls settled, none read back", settled, readBack)
	}

	start := waitLogStart(t, s, func(start uint64) bool { return start > last.Offset/2 })
	waitUntil(t, 10*time.Second, "ledgers below the start deleted", func() bool {
		ms, err := ledger.List(ctx, s.cli, ledger.Filter{})
		if err != nil {
			return false
		}
		for _, m := range ms {
			if m.HasOffsets() && m.EndOffset <= start {
				return false
			}
		}
		return true
	})
	if journal, written := s.store.JournalBytes(), int64(len(acked))*1000; journal > written/4 {
		t.Fatalf("the journal holds %d bytes of %d written: deleted ledgers' segments are not freed", journal, written)
	}

	err = c.Read(ctx, 0, 10, func(*client.Page) error { return nil })
	if e := apierr.FromGRPC(err); e.Code != apierr.OffsetOutOfRange || !strings.Contains(e.Message, fmt.Sprintf("log start %d", s.reader.LogStart())) {
		t.Fatalf("read below the start: %v", err)
	}
	from := s.reader.LogStart()
	var served int
	err = c.Read(ctx, from, 0, func(page *client.Page) error {
		for _, m := range page.Messages {
			if want, ok := acked[m.Offset]; !ok || want != string(m.Message.Value) {
				return fmt.Errorf("offset %d: %q, acknowledged %q", m.Offset, m.Message.Value[:10], want[:min(10, len(want))])
			}
			served++
		}
		return nil
	})
	if err != nil || served == 0 {
		t.Fatalf("read from the start: %d served, %v", served, err)
	}

	st, err := c.Status(ctx)
	// The start may move on between the status and this check.
	if err != nil || st.LogStart == 0 || st.LogStart > s.reader.LogStart() || st.Ledgers == 0 || st.StoreLedgers == 0 || st.StoreLedgers > 64 ||
		st.OldestMessageAgeMs == 0 || st.CommitMapSegments == 0 {
		t.Fatalf("status %+v, %v", st, err)
	}

	s.Close()
	s = startServerWith(t, cfg)
	defer s.Close()
	c = dial(t, s)
	raw, err := c.RawProducer().Produce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lastSeq := uint64(2500*4 - 1)
	if err := raw.Send(&orderlogpb.ProduceRequest{ProducerId: id, Epoch: epoch, FirstSeq: lastSeq, RequestId: 1,
		Messages: []*orderlogpb.Message{{Topic: "t", Value: []byte("again")}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := raw.Recv()
	if err != nil || resp.ErrorCode != "" || !resp.Acks[0].Duplicate || resp.Acks[0].Offset != last.Offset {
		t.Fatalf("the last seq resent after a restart: %+v, %v (acknowledged at %d)", resp, err, last.Offset)
	}
}

// waitLogStart waits for the node's reader to see a log start that ok
// accepts, and returns it.
func waitLogStart(t *testing.T, s *Server, ok func(uint64) bool) uint64 {
	t.Helper()
	waitUntil(t, 30*time.Second, "log start", func() bool { return ok(s.reader.LogStart()) })
	return s.reader.LogStart()
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
