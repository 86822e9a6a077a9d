package node

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/ingest/retention"
	"orderlog/proto/orderlogpb"
	"orderlog/tiering"
	"orderlog/tiering/objstore"
	"orderlog/tiering/objstore/s3test"
)

func produceRandom(t *testing.T, ctx context.Context, p *client.Producer, frames int) uint64 {
	t.Helper()
	var last uint64
	for i := range frames {
		frame := make([]*orderlogpb.Message, 8)
		for j := range frame {
			value := make([]byte, 1024) // incompressible: files reach the multipart size
			rand.Read(value)
			frame[j] = &orderlogpb.Message{Topic: fmt.Sprintf("t%d", j%3), Key: fmt.Appendf(nil, "k%d", i%13), Value: value}
		}
		acks, err := p.Produce(ctx, frame...)
		if err != nil {
			t.Fatal(err)
		}
		last = acks[len(acks)-1].Offset
	}
	return last
}

// TestArchiveToS3RidesOutAnOutage: a node archives to a real
// S3-compatible server in files larger than a multipart part. The server
// goes down for a while: producing and reading go on, T waits and the log
// start with it, and once the server is back the archive catches up;
// every read, below the log start too, is then what it was hot.
func TestArchiveToS3RidesOutAnOutage(t *testing.T) {
	s3 := s3test.Start(t)
	s3.SetEnv(t)
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Ingest: ingest.Config{RollBytes: 1 << 20}, SegmentSize: 4 << 20,
		Retention: RetentionConfig{Policy: retention.Policy{Bytes: 2 << 20}, Interval: 50 * time.Millisecond, DeleteGrace: -1},
		Archive: ArchiveConfig{URL: "s3://" + s3.Bucket + "/log", S3: objstore.Options{Endpoint: s3.Endpoint, PartSize: 5 << 20},
			// Files are cut by size, not by age, even as slowly as the race
			// detector produces: the first one must pass the part size.
			FileBytes: 6 << 20, FileAge: 10 * time.Second, HotWindow: time.Millisecond, Interval: 50 * time.Millisecond}}
	s := startServerWith(t, cfg)
	defer s.Close()
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := c.NewProducer(ctx, "s3", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	head := func() tiering.Head {
		h, err := tiering.ReadHead(ctx, s.cli)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	last := produceRandom(t, ctx, p, 1000) // 8 MiB: one file over the part size
	waitUntil(t, 60*time.Second, "the first files archived", func() bool { return head().T > last })
	before := readRange(t, ctx, c, 0, nil)

	s3.Stop()
	down := head().T
	last = produceRandom(t, ctx, p, 400) // producing goes on
	waitCommitted(t, c, last+1)
	time.Sleep(time.Second)
	if h := head(); h.T != down || s.reader.LogStart() > down {
		t.Fatalf("while the store was down T moved to %d (from %d), the log start to %d", h.T, down, s.reader.LogStart())
	}
	during := readRange(t, ctx, c, s.reader.LogStart(), nil) // the hot log reads on
	var want logRead
	want.messages = before.messages
	for _, m := range during.messages {
		if m.Offset > before.messages[len(before.messages)-1].Offset {
			want.messages = append(want.messages, m)
		}
	}
	if n := len(want.messages); n == len(before.messages) || want.messages[n-1].Offset != last {
		t.Fatalf("the hot read during the outage ends at %d, the last message is %d", want.messages[n-1].Offset, last)
	}

	s3.Restart()
	waitUntil(t, 60*time.Second, "the archive caught up and the ledgers deleted", func() bool {
		return head().T > last && s.reader.LogStart() > down
	})
	store, err := objstore.Open(ctx, "s3://"+s3.Bucket+"/log", objstore.Options{Endpoint: s3.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	objects, err := store.List(ctx, "dt=")
	if err != nil {
		t.Fatal(err)
	}
	multipart := false
	for _, o := range objects {
		multipart = multipart || o.Size > 5<<20
	}
	if !multipart || int64(len(objects)) != head().Files {
		t.Fatalf("objects %v for %d files: want one over the 5 MiB part size", objects, head().Files)
	}
	if err := sameRead(want, readRange(t, ctx, c, 0, nil)); err != nil {
		t.Fatalf("the read after the outage, below the log start from S3, differs: %v", err)
	}
}

// TestArchiveWithWrongCredentialsSaysSo: a wrong secret is logged as the
// store refusing the credentials, at once, and the node serves on.
func TestArchiveWithWrongCredentialsSaysSo(t *testing.T) {
	s3 := s3test.Start(t)
	s3.SetEnv(t)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	var mu sync.Mutex
	var refused []string
	logger := slog.New(slog.NewTextHandler(lineWriter(func(line string) {
		if strings.Contains(line, "refused the credentials") {
			mu.Lock()
			refused = append(refused, line)
			mu.Unlock()
		}
	}), nil))
	cfg := Config{DataDir: t.TempDir(), GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: logger,
		Archive: ArchiveConfig{URL: "s3://" + s3.Bucket, S3: objstore.Options{Endpoint: s3.Endpoint},
			FileBytes: 1 << 20, FileAge: 100 * time.Millisecond, Interval: 50 * time.Millisecond}}
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	c := dial(t, s)
	p, err := c.NewProducer(ctx, "creds", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Produce(ctx, &orderlogpb.Message{Topic: "t", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the refused credentials logged", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(refused) > 0
	})
	if _, err := p.Produce(ctx, &orderlogpb.Message{Topic: "t", Value: []byte("v")}); err != nil {
		t.Fatalf("producing after the archive failed: %v", err)
	}
}
