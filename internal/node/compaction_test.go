package node

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/ingest/retention"
	"orderlog/proto/orderlogpb"
	"orderlog/reader"
)

// TestCompactedTopicKeepsTheLatestOfEachKeyBelowTheLogStart: retention
// deletes the ledgers of a log that holds a compacted topic ("users"), a
// topic kept forever ("audit") and filler. Below the log start a read then
// serves, at their acknowledged offsets, the latest "users" message of
// each key and every "audit" message, and nothing else: the offsets
// between them are skipped with reason "compacted", a key whose last
// message is a tombstone past its delete retention is gone, and the last
// value of every key read over the whole log is the last one written.
func TestCompactedTopicKeepsTheLatestOfEachKeyBelowTheLogStart(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), Ingest: ingest.Config{RollBytes: 16 << 10}, SegmentSize: 128 << 10,
		Retention: RetentionConfig{Policy: retention.Policy{Bytes: 64 << 10}, Interval: 50 * time.Millisecond, DeleteGrace: -1}}
	s := startServerWith(t, cfg)
	defer s.Close()
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := orderlogpb.NewAdminClient(grpcConn(t, s))
	for name, config := range map[string]*orderlogpb.TopicConfig{
		"users": {CleanupPolicy: "compact", DeleteRetentionMs: 1},
		"audit": {RetentionMs: -1},
	} {
		if _, err := admin.CreateTopic(ctx, &orderlogpb.CreateTopicRequest{Name: name, Config: config}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := c.NewProducer(ctx, "writer", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	written := map[uint64]*orderlogpb.Message{} // offset → message
	lastOf := map[string]uint64{}               // users key → offset of its last message
	produce := func(msgs ...*orderlogpb.Message) {
		t.Helper()
		acks, err := p.Produce(ctx, msgs...)
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range acks {
			written[a.Offset] = msgs[i]
			if msgs[i].Topic == "users" {
				lastOf[string(msgs[i].Key)] = a.Offset
			}
		}
	}
	noise := bytes.Repeat([]byte{'n'}, 4000)
	for round := range 30 {
		var frame []*orderlogpb.Message
		for k := range 10 {
			frame = append(frame, &orderlogpb.Message{Topic: "users", Key: fmt.Appendf(nil, "k%d", k), Value: fmt.Appendf(nil, "r%d", round)})
		}
		frame = append(frame, &orderlogpb.Message{Topic: "audit", Value: fmt.Appendf(nil, "a%d", round)})
		produce(frame...)
		produce(&orderlogpb.Message{Topic: "noise", Value: noise}, &orderlogpb.Message{Topic: "noise", Value: noise})
	}
	produce(&orderlogpb.Message{Topic: "users", Key: []byte("k9")}) // a tombstone
	tombstone := lastOf["k9"]
	for range 40 { // push everything above below the start
		produce(&orderlogpb.Message{Topic: "noise", Value: noise}, &orderlogpb.Message{Topic: "noise", Value: noise})
	}
	waitUntil(t, 30*time.Second, "the start past the tombstone, with its retained set", func() bool {
		return s.reader.LogStart() > tombstone && s.reader.ReadStart() < s.reader.LogStart()
	})
	start := s.reader.LogStart()

	var below []*orderlogpb.StoredMessage
	var skipped []*orderlogpb.SkippedRange
	lastRead := map[string]string{}
	from := s.reader.ReadStart()
	err = c.Read(ctx, from, 0, func(page *client.Page) error {
		for _, m := range page.Messages {
			want, ok := written[m.Offset]
			if !ok || want.Topic != m.Message.Topic || !bytes.Equal(want.Value, m.Message.Value) || !bytes.Equal(want.Key, m.Message.Key) {
				return fmt.Errorf("offset %d: %v, written %v", m.Offset, m.Message, want)
			}
			if m.Offset < start {
				below = append(below, m)
			}
			if m.Message.Topic == "users" {
				lastRead[string(m.Message.Key)] = string(m.Message.Value)
			}
		}
		skipped = append(skipped, page.Skipped...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	seen, audits := map[string]bool{}, 0
	for _, m := range below {
		switch m.Message.Topic {
		case "users":
			key := string(m.Message.Key)
			if seen[key] || key == "k9" {
				t.Fatalf("below the start: a second message of key %s, or the tombstoned key (offset %d)", key, m.Offset)
			}
			seen[key] = true
		case "audit":
			audits++
		default:
			t.Fatalf("below the start: a %s message at %d", m.Message.Topic, m.Offset)
		}
	}
	if audits != 30 || len(seen) != 9 {
		t.Fatalf("below the start: %d audit messages (want 30), users keys %v (want k0..k8)", audits, seen)
	}
	for k := range 9 {
		if got := lastRead[fmt.Sprintf("k%d", k)]; got != "r29" {
			t.Fatalf("key k%d reads %q last, want r29", k, got)
		}
	}
	compacted := 0
	for _, sk := range skipped {
		if sk.First < start && sk.Reason != reader.SkipCompacted {
			t.Fatalf("skipped %+v below the start without reason compacted", sk)
		}
		if sk.Reason == reader.SkipCompacted {
			compacted++
		}
	}
	if compacted == 0 {
		t.Fatal("no compacted range reported")
	}
	err = c.Read(ctx, from-1, 1, func(*client.Page) error { return nil })
	if from > 0 && err == nil {
		t.Fatal("a read below the retained set's first message was served")
	}
}
