package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/ingest/retention"
	"orderlog/proto/orderlogpb"
	"orderlog/tiering"
)

// logRead is a whole read of a range: its messages, and its skipped
// ranges merged where they touch.
type logRead struct {
	messages []*orderlogpb.StoredMessage
	skipped  []*orderlogpb.SkippedRange
}

func readRange(t *testing.T, ctx context.Context, c *client.Client, from uint64, req *orderlogpb.QueryRequest) logRead {
	t.Helper()
	var out logRead
	collect := func(page *client.Page) error {
		out.messages = append(out.messages, page.Messages...)
		for _, s := range page.Skipped {
			if n := len(out.skipped); n > 0 && out.skipped[n-1].End == s.First && out.skipped[n-1].Reason == s.Reason {
				out.skipped[n-1] = &orderlogpb.SkippedRange{First: out.skipped[n-1].First, End: s.End, Reason: s.Reason}
				continue
			}
			out.skipped = append(out.skipped, s)
		}
		return nil
	}
	var err error
	if req != nil {
		err = c.Query(ctx, req, collect)
	} else {
		err = c.Read(ctx, from, 0, collect)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameRead(a, b logRead) error {
	if len(a.messages) != len(b.messages) {
		return fmt.Errorf("%d messages, then %d", len(a.messages), len(b.messages))
	}
	for i := range a.messages {
		if !proto.Equal(a.messages[i], b.messages[i]) {
			return fmt.Errorf("message %d: %v, then %v", i, a.messages[i], b.messages[i])
		}
	}
	if !slices.EqualFunc(a.skipped, b.skipped, func(x, y *orderlogpb.SkippedRange) bool { return proto.Equal(x, y) }) {
		return fmt.Errorf("skipped %v, then %v", a.skipped, b.skipped)
	}
	return nil
}

// TestReadsBelowTheLogStartComeFromTheArchive: a node archives its log to
// a directory in small files, retention deletes the archived ledgers
// (never past the archived watermark T), and a read of the whole log, and
// a query by key, then answer exactly what they answered from the hot log
// before: the same messages at the same offsets, the same holes.
func TestReadsBelowTheLogStartComeFromTheArchive(t *testing.T) {
	dir := t.TempDir()
	archiveDir := filepath.Join(dir, "archive")
	cfg := Config{DataDir: dir, Ingest: ingest.Config{RollBytes: 16 << 10}, SegmentSize: 128 << 10,
		Retention: RetentionConfig{Policy: retention.Policy{Bytes: 32 << 10}, Interval: 50 * time.Millisecond, DeleteGrace: -1},
		Archive: ArchiveConfig{URL: "file://" + archiveDir, FileBytes: 24 << 10, FileAge: 200 * time.Millisecond,
			HotWindow: time.Millisecond, Interval: 50 * time.Millisecond}}
	s := startServerWith(t, cfg)
	defer s.Close()
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := c.NewProducer(ctx, "archived", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	audit, err := c.NewProducer(ctx, "audit", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer audit.Close()
	var last uint64
	for i := range 300 {
		if i%10 == 0 {
			if _, err := audit.Produce(ctx, &orderlogpb.Message{Topic: "audit", Value: fmt.Appendf(nil, "audit %d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		frame := []*orderlogpb.Message{
			{Topic: "orders", Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, "order %d %0400d", i, i),
				Headers: []*orderlogpb.Header{{Key: "h", Value: []byte("1")}, {Key: "h", Value: nil}}, ClientTimeUs: int64(1000 + i)},
			{Topic: "clicks", Value: fmt.Appendf(nil, "click %d %0300d", i, i), MessageId: fmt.Appendf(nil, "m%d", i)},
		}
		acks, err := p.Produce(ctx, frame...)
		if err != nil {
			t.Fatal(err)
		}
		last = acks[len(acks)-1].Offset
	}
	waitCommitted(t, c, last+1)
	hot := readRange(t, ctx, c, 0, nil)
	byKey := &orderlogpb.QueryRequest{FromOffset: 0, Key: []byte("k3")}
	hotKey := readRange(t, ctx, c, 0, byKey)
	if len(hot.messages) != 630 || len(hotKey.messages) == 0 {
		t.Fatalf("hot read: %d messages, %d of key k3", len(hot.messages), len(hotKey.messages))
	}
	// A query by producer and one by ingest time, as users ask them.
	var auditID uint64
	for _, m := range hot.messages {
		if m.Message.Topic == "audit" {
			auditID = m.ProducerId
		}
	}
	byProducer := &orderlogpb.QueryRequest{ProducerId: auditID}
	hotProducer := readRange(t, ctx, c, 0, byProducer)
	for _, m := range hotProducer.messages {
		if m.ProducerId != auditID || m.Message.Topic != "audit" {
			t.Fatalf("the query by producer %d answered %v", auditID, m)
		}
	}
	if len(hotProducer.messages) != 30 {
		t.Fatalf("the query by producer %d answered %d messages, want 30", auditID, len(hotProducer.messages))
	}
	byTime := &orderlogpb.QueryRequest{FromTimeUs: hot.messages[100].IngestTimeUs, ToTimeUs: hot.messages[400].IngestTimeUs}
	hotTime := readRange(t, ctx, c, 0, byTime)
	want := 0
	for _, m := range hot.messages {
		if m.IngestTimeUs >= byTime.FromTimeUs && m.IngestTimeUs < byTime.ToTimeUs {
			want++
		}
	}
	if n := len(hotTime.messages); n != want || n == 0 {
		t.Fatalf("the query by ingest time answered %d messages, the read holds %d in its window", n, want)
	}

	waitUntil(t, 60*time.Second, "the log archived and its ledgers deleted", func() bool {
		head, err := tiering.ReadHead(ctx, s.cli)
		return err == nil && head.T > last && s.reader.LogStart() > 300
	})
	if start := s.reader.ReadStart(); start != 0 {
		t.Fatalf("reads start at %d with the archive from 0", start)
	}
	archived := readRange(t, ctx, c, 0, nil)
	if err := sameRead(hot, archived); err != nil {
		t.Fatalf("the read from the archive differs from the hot one: %v", err)
	}
	if err := sameRead(hotKey, readRange(t, ctx, c, 0, byKey)); err != nil {
		t.Fatalf("the query by key from the archive differs from the hot one: %v", err)
	}
	if err := sameRead(hotProducer, readRange(t, ctx, c, 0, byProducer)); err != nil {
		t.Fatalf("the query by producer from the archive differs from the hot one: %v", err)
	}
	if err := sameRead(hotTime, readRange(t, ctx, c, 0, byTime)); err != nil {
		t.Fatalf("the query by ingest time from the archive differs from the hot one: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(archiveDir, "dt=*", "*.parquet"))
	manifests, _ := filepath.Glob(filepath.Join(archiveDir, tiering.ManifestDir, "*.json"))
	if len(files) < 2 || len(files) != len(manifests) {
		t.Fatalf("%d archive files, %d manifest segments; want several, one each", len(files), len(manifests))
	}
	if leftovers, _ := os.ReadDir(filepath.Join(dir, "tiering")); len(leftovers) > 1 {
		t.Fatalf("the worker's local directory holds %d files", len(leftovers))
	}
}
