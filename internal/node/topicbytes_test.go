package node

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/ingest/coordinator"
	"orderlog/ingest/ledger"
	"orderlog/ingest/retention"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
	"orderlog/reader"
)

// TestTopicByteLimitKeepsItsNewestBytes: "metrics" may keep 12 KiB, and
// "audit", kept forever below the log start, 32 KiB; the log keeps 48 KiB.
// Once more than that is written, a read of the whole log returns of each
// topic only its newest messages, within its limit and a ledger's slack,
// reports the hidden ones as skipped with reason "retention", and keeps
// every other message; the retained set below the start holds no more of
// "audit" than its limit allows.
func TestTopicByteLimitKeepsItsNewestBytes(t *testing.T) {
	// A ledger holds a roll's bytes and what came while the next one
	// opened: slack is what a topic may keep beyond its limit.
	const rollBytes, metricsLimit, auditLimit = 8 << 10, 12 << 10, 32 << 10
	const slack = 2 * rollBytes
	cfg := Config{DataDir: t.TempDir(), Ingest: ingest.Config{RollBytes: rollBytes}, SegmentSize: 128 << 10,
		Retention: RetentionConfig{Policy: retention.Policy{Bytes: 48 << 10}, Interval: 50 * time.Millisecond, DeleteGrace: -1}}
	s := startServerWith(t, cfg)
	defer s.Close()
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := orderlogpb.NewAdminClient(grpcConn(t, s))
	for name, config := range map[string]*orderlogpb.TopicConfig{
		"metrics": {RetentionBytes: metricsLimit},
		"audit":   {RetentionMs: -1, RetentionBytes: auditLimit},
	} {
		if _, err := admin.CreateTopic(ctx, &orderlogpb.CreateTopicRequest{Name: name, Config: config}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 10*time.Second, "ingest counts the limited topics", func() bool {
		return s.ingest.CountsTopic("metrics") && s.ingest.CountsTopic("audit") && !s.ingest.CountsTopic("other")
	})
	p, err := c.NewProducer(ctx, "writer", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	written := map[uint64]*orderlogpb.Message{}
	offsetsOf := map[string][]uint64{}
	value := bytes.Repeat([]byte{'v'}, 1000)
	// The writes wait for each roll: a loaded machine opens the next
	// ledger late, and a ledger holding many rolls' bytes would make a
	// topic's limit drop or keep more than the test reckons with.
	closedEnd := func() uint64 {
		ms, err := ledger.List(ctx, s.cli, ledger.Filter{States: []ledger.State{ledger.StateClosed}})
		if err != nil {
			t.Fatal(err)
		}
		var end uint64
		for _, m := range ms {
			if m.Kind == ledger.KindIngest {
				end = max(end, m.EndOffset)
			}
		}
		return end
	}
	sinceRoll := 0
	for round := range 120 {
		var frame []*orderlogpb.Message
		for _, topic := range []string{"metrics", "audit", "other"} {
			frame = append(frame, &orderlogpb.Message{Topic: topic, Key: fmt.Appendf(nil, "%s-%d", topic, round), Value: value})
		}
		acks, err := p.Produce(ctx, frame...)
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range acks {
			written[a.Offset] = frame[i]
			offsetsOf[frame[i].Topic] = append(offsetsOf[frame[i].Topic], a.Offset)
			sinceRoll += coordinator.RecordBytes(frame[i])
		}
		if last := acks[len(acks)-1].Offset; sinceRoll >= rollBytes {
			waitUntil(t, 10*time.Second, "a roll", func() bool { return closedEnd() > last })
			sinceRoll = 0
		}
	}
	recordBytes := coordinator.RecordBytes(written[offsetsOf["metrics"][0]])
	lastMetrics := offsetsOf["metrics"][len(offsetsOf["metrics"])-1]
	lastOther := offsetsOf["other"][len(offsetsOf["other"])-1] // the reader's C may lag the acks
	waitUntil(t, 30*time.Second, "the topics' starts moved and the log start moved", func() bool {
		starts, _, err := retention.ReadTopicStarts(ctx, s.cli)
		return err == nil && starts["metrics"] > 0 && starts["audit"] > 0 && s.reader.LogStart() > 0 && s.reader.ReadStart() < s.reader.LogStart()
	})
	starts, _, err := retention.ReadTopicStarts(ctx, s.cli)
	if err != nil {
		t.Fatal(err)
	}
	if starts["other"] != 0 || starts["metrics"] > lastMetrics {
		t.Fatalf("topic starts %v: want none for \"other\", and metrics' not past its last message %d", starts, lastMetrics)
	}
	waitUntil(t, 10*time.Second, "the reader learned the topics' starts", func() bool {
		return s.reader.TopicStart("metrics") >= starts["metrics"] && s.reader.TopicStart("audit") >= starts["audit"]
	})

	// The worker catches up with the last rolls in a few passes: read the
	// whole log until a read that no start moved under finds each topic's
	// newest bytes within its limit.
	var read map[string][]uint64
	var hidden []*orderlogpb.SkippedRange
	var logStart uint64
	starts3 := func() [3]uint64 {
		return [3]uint64{s.reader.LogStart(), s.reader.TopicStart("metrics"), s.reader.TopicStart("audit")}
	}
	readAll := func() bool {
		before := starts3()
		read, hidden, logStart = map[string][]uint64{}, nil, before[0]
		err := c.Read(ctx, s.reader.ReadStart(), 0, func(page *client.Page) error {
			for _, m := range page.Messages {
				want := written[m.Offset]
				if want == nil || want.Topic != m.Message.Topic || !bytes.Equal(want.Key, m.Message.Key) {
					t.Fatalf("offset %d: %v, written %v", m.Offset, m.Message, want)
				}
				read[m.Message.Topic] = append(read[m.Message.Topic], m.Offset)
			}
			for _, sk := range page.Skipped {
				if sk.Reason == reader.SkipRetention {
					hidden = append(hidden, sk)
				}
			}
			return nil
		})
		if err != nil && (apierr.As(err).Code == apierr.OffsetOutOfRange || apierr.As(err).Class() == apierr.ClassRetry) {
			return false // the log start moved on, or the reader has not loaded what is kept below it yet
		}
		if err != nil {
			t.Fatal(err)
		}
		return starts3() == before
	}
	stable := false
	defer func() {
		if !stable {
			t.Logf("last read: stable %v, other's last read %v, metrics %d and audit %d bytes; starts %v",
				readAll(), slices.Contains(read["other"], lastOther), len(read["metrics"])*recordBytes, len(read["audit"])*recordBytes, starts3())
		}
	}()
	waitUntil(t, 10*time.Second, "each topic's reads within its limit, no start moving", func() bool {
		return readAll() && slices.Contains(read["other"], lastOther) && len(read["metrics"])*recordBytes <= metricsLimit+slack && len(read["audit"])*recordBytes <= auditLimit+slack
	})
	stable = true
	for _, topic := range []string{"metrics", "audit"} {
		all, got := offsetsOf[topic], read[topic]
		if len(got) == 0 || len(got) == len(all) {
			t.Fatalf("%s: read %d of its %d messages; want its newest, not all", topic, len(got), len(all))
		}
		if !slices.Equal(got, all[len(all)-len(got):]) {
			t.Fatalf("%s: read %v, not the newest of %v", topic, got, all)
		}
		for _, off := range all[:len(all)-len(got)] {
			if off >= logStart && !slices.ContainsFunc(hidden, func(sk *orderlogpb.SkippedRange) bool { return sk.First <= off && off < sk.End }) {
				t.Fatalf("%s: offset %d above the log start %d neither read nor skipped for retention", topic, off, logStart)
			}
		}
	}
	for _, off := range offsetsOf["other"] {
		if off >= logStart && !slices.Contains(read["other"], off) {
			t.Fatalf("other: offset %d above the log start %d not read", off, logStart)
		}
	}

	// The retained set drops what lies below a topic's start when it is
	// rebuilt, at the start's next move: the last ones may still come.
	var auditBytes int64
	waitUntil(t, 10*time.Second, "the retained set within audit's limit", func() bool {
		set, err := retention.ReadRetained(ctx, s.cli)
		if err != nil {
			t.Fatal(err)
		}
		auditBytes = 0
		for _, l := range set.Ledgers {
			m, err := ledger.Get(ctx, s.cli, l.ID)
			if err != nil {
				t.Fatal(err)
			}
			auditBytes += m.TopicBytes["audit"]
		}
		return auditBytes > 0 && auditBytes <= auditLimit+slack
	})
}
