package node

import (
	"bytes"
	"context"
	"testing"
	"time"

	"orderlog/client"
)

// The load generator (`orderlog bench`) logs exactly what it reports: every
// message once, each producer's in its send order, with the bench payload,
// and one latency per frame.
func TestLoadLogsEveryMessageOnce(t *testing.T) {
	s := startServer(t, t.TempDir())
	defer s.Close()
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cfg := client.LoadConfig{Streams: 3, Size: 100, Frame: 16, InFlight: 4, Count: 3 * 16 * 10}
	result, err := client.RunLoad(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if result.Messages != cfg.Count || len(result.Latencies) != cfg.Count/cfg.Frame {
		t.Fatalf("reported %d messages and %d frame latencies, want %d and %d",
			result.Messages, len(result.Latencies), cfg.Count, cfg.Count/cfg.Frame)
	}
	waitCommitted(t, c, uint64(cfg.Count))
	msgs, holes := readAll(t, c)
	if len(msgs) != cfg.Count || len(holes) != 0 {
		t.Fatalf("read %d messages and %d holes, want %d and none", len(msgs), len(holes), cfg.Count)
	}
	nextSeq := map[uint64]uint64{}
	for _, m := range msgs {
		if len(m.Message.Value) != cfg.Size || !bytes.Equal(m.Message.Value, msgs[0].Message.Value) {
			t.Fatalf("offset %d: value of %d bytes differs from the bench payload", m.Offset, len(m.Message.Value))
		}
		if m.ProducerSeq != nextSeq[m.ProducerId] {
			t.Fatalf("offset %d: producer %d seq %d, want %d", m.Offset, m.ProducerId, m.ProducerSeq, nextSeq[m.ProducerId])
		}
		nextSeq[m.ProducerId]++
	}
	if len(nextSeq) != cfg.Streams {
		t.Fatalf("%d producers logged, want %d", len(nextSeq), cfg.Streams)
	}
}
