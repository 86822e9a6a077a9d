package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
	"orderlog/tiering"
	"orderlog/tiering/parquetfile"
	"orderlog/tiering/parquetfile/duckcheck"
)

// duckFile is what tiering/parquetfile/duckcheck/check.mjs prints for a
// file: DuckDB's own reading of it.
type duckFile struct {
	File      string            `json:"file"`
	Rows      int64             `json:"rows"`
	MinOffset *string           `json:"min_offset"`
	MaxOffset *string           `json:"max_offset"`
	InOrder   bool              `json:"in_order"`
	KV        map[string]string `json:"kv"`
	Holes     *string           `json:"holes"`
	Digest    string            `json:"digest"`
}

// archiveProducers write to three topics through idempotent producers
// until stopped, riding out the server's restarts; what they send has
// keys, headers, message ids and client times.
func archiveProducers(addr string, stop <-chan struct{}, wg *sync.WaitGroup) {
	for i := range 3 {
		wg.Go(func() {
			for n := 0; ; {
				select {
				case <-stop:
					return
				default:
				}
				c, err := client.Dial(addr)
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				ctx, cancel := context.WithCancel(context.Background())
				p, err := c.NewProducer(ctx, fmt.Sprintf("archiver-%d", i), client.ProducerOptions{})
				for err == nil {
					select {
					case <-stop:
						err = context.Canceled
						continue
					default:
					}
					var frame []*orderlogpb.Message
					for range 16 {
						n++
						frame = append(frame, &orderlogpb.Message{Topic: []string{"orders", "clicks", "audit"}[n%3],
							Key: fmt.Appendf(nil, "k%d", n%11), Value: bytes.Repeat([]byte{byte(n)}, 300+n%200),
							Headers:   []*orderlogpb.Header{{Key: "trace", Value: fmt.Appendf(nil, "%d", n)}, {Key: "trace", Value: nil}},
							MessageId: fmt.Appendf(nil, "p%d-%d", i, n), ClientTimeUs: int64(n % 2 * 1000)})
					}
					_, err = p.Produce(ctx, frame...)
				}
				cancel()
				c.Close()
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// TestArchiveAgreesWithDuckDB: orderlog dev archives a log with holes (it
// is SIGKILLed while producers write to three topics) in small files,
// deletes the archived ledgers, and DuckDB, reading the files on its own,
// agrees with orderlog's read of the same range: each file's row count,
// first and last offset, rows in offset order, a digest over every
// column, and its holes equal to the skipped ranges orderlog reports; the
// files tile the archived range, row groups increase without overlap,
// and the README's DuckDB query counts what orderlog counts per topic.
func TestArchiveAgreesWithDuckDB(t *testing.T) {
	srv := newDevProcess(t)
	t.Cleanup(func() {
		if t.Failed() {
			if data, err := os.ReadFile(srv.log.Name()); err == nil {
				kept := filepath.Join(os.TempDir(), "orderlog-"+t.Name()+".log")
				if os.WriteFile(kept, data, 0o644) == nil {
					t.Logf("server log kept in %s", kept)
				}
			}
		}
	})
	archiveDir := filepath.Join(srv.dataDir, "archive")
	etcdAddr := freeAddr(t)
	start := func() {
		srv.cmd = startChild(t, srv.log, "dev", "--data", srv.dataDir, "--grpc-addr", srv.grpcAddr, "--http-addr", srv.httpAddr,
			"--etcd-addr", etcdAddr, "--archive", "file://"+archiveDir, "--archive-file-bytes", "96KiB", "--archive-file-age", "300ms",
			"--archive-hot-window", "500ms", "--retention-bytes", "256KiB", "--ledger-roll-bytes", "64KiB", "--retention-check", "100ms")
	}
	start()
	c, err := client.Dial(srv.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv.waitReady(c)
	stop, wg := make(chan struct{}), &sync.WaitGroup{}
	archiveProducers(srv.grpcAddr, stop, wg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	holes, kills := 0, 0
	for ; kills < 4 && (kills < 2 || holes == 0); kills++ {
		time.Sleep(1500 * time.Millisecond)
		srv.kill()
		start()
		srv.waitReady(c)
		holes = len(readAll(t, ctx, c).skipped)
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if holes == 0 {
		t.Fatal("four SIGKILLs during the writes left no hole in the log")
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdAddr}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var head tiering.Head
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		st, err := c.Status(ctx)
		if head, err = tiering.ReadHead(ctx, cli); err == nil && st != nil && head.T == st.Committed && st.LogStart > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log was not archived and deleted: head %+v, status %v; log in %s", head, st, srv.log.Name())
		}
	}
	log := readAll(t, ctx, c)
	if len(log.skipped) == 0 || head.First != 0 {
		t.Fatalf("orderlog's read reports %d holes, the archive starts at %d", len(log.skipped), head.First)
	}

	files, _ := filepath.Glob(filepath.Join(archiveDir, "dt=*", "*.parquet"))
	sort.Strings(files)
	if len(files) < 3 || int64(len(files)) != head.Files {
		t.Fatalf("%d archive files, the head counts %d", len(files), head.Files)
	}
	var duck []duckFile
	duckcheck.Run(t, &duck, files...)
	next := head.First
	for i, d := range duck {
		f := openArchiveFile(t, files[i])
		meta := f.Meta()
		if meta.First != next {
			t.Fatalf("%s starts at %d, the previous file ends at %d", files[i], meta.First, next)
		}
		next = meta.End
		checkRowGroups(t, files[i], f)
		msgs, skipped := log.within(meta.First, meta.End)
		wantHoles := holesText(skipped)
		switch {
		case d.Rows != int64(len(msgs)) || !d.InOrder:
			t.Fatalf("%s: DuckDB reads %d rows (in offset order: %v), orderlog %d messages", files[i], d.Rows, d.InOrder, len(msgs))
		case len(msgs) > 0 && (d.MinOffset == nil || *d.MinOffset != fmt.Sprint(msgs[0].Offset) || *d.MaxOffset != fmt.Sprint(msgs[len(msgs)-1].Offset)):
			t.Fatalf("%s: DuckDB's offsets [%v, %v], orderlog's [%d, %d]", files[i], d.MinOffset, d.MaxOffset, msgs[0].Offset, msgs[len(msgs)-1].Offset)
		case d.Digest != parquetfile.Digest(msgs, nil) || d.Digest != meta.Digest:
			t.Fatalf("%s: DuckDB's digest %s, orderlog's read %s, the footer %s", files[i], d.Digest, parquetfile.Digest(msgs, nil), meta.Digest)
		case d.Holes == nil || *d.Holes != wantHoles || d.KV["orderlog.holes"] != wantHoles:
			t.Fatalf("%s: DuckDB finds holes %v, the footer says %s, orderlog skips %s", files[i], d.Holes, d.KV["orderlog.holes"], wantHoles)
		}
	}
	if next != head.T {
		t.Fatalf("the files end at %d, T is %d", next, head.T)
	}
	var counts map[string]int
	duckcheck.Run(t, &counts, "--recipe", archiveDir)
	want := map[string]int{}
	archived, _ := log.within(head.First, head.T)
	for _, m := range archived {
		want[m.Message.Topic]++
	}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Fatalf("the README's DuckDB query counts %v, orderlog %v", counts, want)
	}
	t.Logf("%d files, %d messages, %d holes; %d kills", len(files), len(archived), len(log.skipped), kills)
}

// wholeRead is a read of [0, C): messages, and holes merged where they
// touch.
type wholeRead struct {
	messages []*orderlogpb.StoredMessage
	skipped  []*orderlogpb.SkippedRange
}

func readAll(t *testing.T, ctx context.Context, c *client.Client) wholeRead {
	t.Helper()
	var out wholeRead
	err := c.Read(ctx, 0, 0, func(p *client.Page) error {
		out.messages = append(out.messages, p.Messages...)
		for _, s := range p.Skipped {
			if s.Reason != "" {
				return fmt.Errorf("skipped %v for %q", s, s.Reason)
			}
			if n := len(out.skipped); n > 0 && out.skipped[n-1].End == s.First {
				out.skipped[n-1] = &orderlogpb.SkippedRange{First: out.skipped[n-1].First, End: s.End}
				continue
			}
			out.skipped = append(out.skipped, s)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// within is the read's messages and holes in [first, end), holes clipped.
func (r wholeRead) within(first, end uint64) ([]*orderlogpb.StoredMessage, []*orderlogpb.SkippedRange) {
	var msgs []*orderlogpb.StoredMessage
	for _, m := range r.messages {
		if m.Offset >= first && m.Offset < end {
			msgs = append(msgs, m)
		}
	}
	var holes []*orderlogpb.SkippedRange
	for _, s := range r.skipped {
		if s.End > first && s.First < end {
			holes = append(holes, &orderlogpb.SkippedRange{First: max(s.First, first), End: min(s.End, end)})
		}
	}
	return msgs, holes
}

// holesText is holes in the footer's orderlog.holes form.
func holesText(holes []*orderlogpb.SkippedRange) string {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, h := range holes {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "[%d,%d]", h.First, h.End)
	}
	b.WriteByte(']')
	return b.String()
}

func openArchiveFile(t *testing.T, path string) *parquetfile.File {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquetfile.Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}

// checkRowGroups: each row group's offsets lie in the file's range, after
// the previous group's.
func checkRowGroups(t *testing.T, path string, f *parquetfile.File) {
	t.Helper()
	meta, prev := f.Meta(), uint64(0)
	for i, g := range f.RowGroups() {
		if g.Rows == 0 {
			continue
		}
		if g.First < meta.First || g.End > meta.End || g.First >= g.End || (i > 0 && g.First < prev) {
			t.Fatalf("%s: row group %d holds [%d, %d), after %d, in [%d, %d)", path, i, g.First, g.End, prev, meta.First, meta.End)
		}
		prev = g.End
	}
}
