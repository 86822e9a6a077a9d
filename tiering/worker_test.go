package tiering

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"orderlog/internal/etcdtest"
	"orderlog/proto/orderlogpb"
	"orderlog/reader"
	"orderlog/tiering/objstore"
	"orderlog/tiering/parquetfile"
)

// memLog is a committed log in memory: messages at their offsets, the
// rest holes. It stands for the node's reader, which the node's tests
// exercise; here the worker's protocol is under test.
type memLog struct {
	mu        sync.Mutex
	messages  map[uint64]*orderlogpb.StoredMessage
	committed uint64
}

func (l *memLog) Committed() (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.committed, true
}

func (l *memLog) ReadRaw(ctx context.Context, from uint64, limit int) (*orderlogpb.ReadResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	page := &orderlogpb.ReadResponse{NextOffset: from, Committed: l.committed}
	for o := from; o < l.committed && len(page.Messages) < limit; o++ {
		if m, ok := l.messages[o]; ok {
			page.Messages = append(page.Messages, m)
		} else if n := len(page.Skipped); n > 0 && page.Skipped[n-1].End == o {
			page.Skipped[n-1].End++
		} else {
			page.Skipped = append(page.Skipped, &orderlogpb.SkippedRange{First: o, End: o + 1})
		}
		page.NextOffset = o + 1
	}
	return page, nil
}

// grow appends n offsets ingested at at, every seventh a hole.
func (l *memLog) grow(n int, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for range n {
		o := l.committed
		if o%7 != 3 {
			l.messages[o] = &orderlogpb.StoredMessage{Offset: o, ProducerId: 1, ProducerSeq: o, IngestTimeUs: at.UnixMicro(),
				Message: &orderlogpb.Message{Topic: fmt.Sprintf("t%d", o%3), Key: fmt.Appendf(nil, "k%d", o%5), Value: bytes.Repeat([]byte{byte(o)}, 200)}}
		}
		l.committed++
	}
}

// crashingStore stops the worker (cancels its context) right after a put
// whose key contains after succeeded: the steps after it never run, as
// when the process is killed there.
type crashingStore struct {
	objstore.Store
	after string
	stop  context.CancelFunc
}

func (s *crashingStore) PutIfAbsent(ctx context.Context, key string, body io.ReaderAt, size int64) error {
	err := s.Store.PutIfAbsent(ctx, key, body, size)
	if err == nil && s.after != "" && strings.Contains(key, s.after) {
		s.stop()
	}
	return err
}

type workerWorld struct {
	cli   *clientv3.Client
	store objstore.Store
	log   *memLog
	dir   string
	now   time.Time
	// keys, when set, encrypt the files the workers write and decrypt
	// them for the workers and checkArchive.
	keys *parquetfile.Keys
	// schemas, when set, resolves the workers' schema versions.
	schemas SchemaResolver
}

func newWorkerWorld(t *testing.T) *workerWorld {
	dir := t.TempDir()
	store, err := objstore.Open(context.Background(), "file://"+filepath.Join(dir, "archive"), objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &workerWorld{cli: etcdtest.Client(t), store: store, log: &memLog{messages: map[uint64]*orderlogpb.StoredMessage{}}, dir: dir,
		now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
}

// worker returns a worker and a leader term for it, elected by hand.
func (w *workerWorld) worker(t *testing.T, name string, store objstore.Store) (*Worker, *leader) {
	t.Helper()
	wk, err := New(Config{Etcd: w.cli, Store: store, Log: w.log, LogStart: func() uint64 { return 0 }, Name: name,
		Cut: CutPolicy{FileBytes: 20 << 10, FileAge: time.Minute}, TempDir: filepath.Join(w.dir, "tmp-"+name),
		Writer: parquetfile.WriterOptions{Keys: w.keys}, Keys: w.keys, Schemas: w.schemas, Now: func() time.Time { return w.now }})
	if err != nil {
		t.Fatal(err)
	}
	key := "test-election/" + name
	if _, err := w.cli.Put(context.Background(), key, name); err != nil {
		t.Fatal(err)
	}
	l := &leader{key: key}
	if err := wk.prepare(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	return wk, l
}

func (w *workerWorld) head(t *testing.T) Head {
	t.Helper()
	h, err := ReadHead(context.Background(), w.cli)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// checkArchive reads the whole archive through an ArchiveReader and
// compares it with the log below T.
func (w *workerWorld) checkArchive(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	a, err := NewArchiveReader(w.store, ReaderOptions{CacheDir: filepath.Join(w.dir, "cache"), CacheBytes: 1 << 20, Keys: w.keys})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := w.cli.Get(ctx, "orderlog/tiering/head")
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("no head: %v", err)
	}
	a.noteHead(ctx, resp.Kvs[0].Value)
	first, end := a.Archived()
	if head := w.head(t); first != head.First || end != head.T {
		t.Fatalf("the reader holds [%d, %d), the head says [%d, %d)", first, end, head.First, head.T)
	}
	next := first
	_, err = a.Scan(ctx, first, end, reader.Filter{}, func(item reader.ArchiveItem) bool {
		m, hole := item.Message, item.Hole
		if m == nil && hole == nil {
			t.Fatalf("an unfiltered scan pruned [%d, %d)", item.PrunedFirst, item.PrunedEnd)
		}
		if hole != nil {
			for o := hole.First; o < hole.End; o++ {
				if w.log.messages[o] != nil || o != next {
					t.Fatalf("hole at %d (expected offset %d) holds a message in the log", o, next)
				}
				next++
			}
			return true
		}
		if m.Offset != next || !proto.Equal(m, w.log.messages[m.Offset]) {
			t.Fatalf("archive offset %d (expected %d): %v, the log has %v", m.Offset, next, m, w.log.messages[m.Offset])
		}
		next++
		return true
	})
	if err != nil || next != end {
		t.Fatalf("scan to %d of [%d, %d): %v", next, first, end, err)
	}
}

// TestWorkerPublishesFilesAndMovesT: files are cut at the byte limit and,
// at C, at the age limit; each has its manifest segment; T follows.
func TestWorkerPublishesFilesAndMovesT(t *testing.T) {
	w := newWorkerWorld(t)
	wk, l := w.worker(t, "a", w.store)
	ctx := context.Background()
	w.log.grow(300, w.now)
	for range 10 {
		if err := wk.Pass(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	head := w.head(t)
	if head.T == 0 || head.T == 300 || head.Files < 2 {
		t.Fatalf("head %+v: want files cut at 20 KiB, the last not yet (younger than a minute)", head)
	}
	w.now = w.now.Add(time.Minute)
	if err := wk.Pass(ctx, l); err != nil {
		t.Fatal(err)
	}
	if head = w.head(t); head.T != 300 {
		t.Fatalf("T %d after the age limit, want 300", head.T)
	}
	w.checkArchive(t)
	manifests, _ := w.store.List(ctx, ManifestDir+"/")
	if int64(len(manifests)) != head.Files {
		t.Fatalf("%d manifest segments for %d files", len(manifests), head.Files)
	}
}

// TestWorkerCutsAtADayBoundary: the first message of a later UTC day
// starts a new file, whose dt partition is that day.
func TestWorkerCutsAtADayBoundary(t *testing.T) {
	w := newWorkerWorld(t)
	wk, l := w.worker(t, "a", w.store)
	ctx := context.Background()
	w.log.grow(10, w.now)
	w.log.grow(10, w.now.Add(24*time.Hour))
	w.now = w.now.Add(48 * time.Hour)
	for range 3 {
		if err := wk.Pass(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	objects, _ := w.store.List(ctx, "dt=")
	if len(objects) != 2 || !strings.HasPrefix(objects[0].Key, "dt=2026-12-02/") || !strings.HasPrefix(objects[1].Key, "dt=2026-12-03/") {
		t.Fatalf("objects %v: want one on 2026-12-02 and one on 2026-12-03", objects)
	}
	if objects[0].Key != "dt=2026-12-02/00000000000000000000-00000000000000000010.parquet" { // 10 is a hole
		t.Fatalf("first object %s", objects[0].Key)
	}
	w.checkArchive(t)
}

// TestASuccessorFinishesAfterEachCrashPoint: the worker stops right after
// recording its plan, after the upload, and after the manifest segment
// (before T moves); a second worker finishes the recorded plan, adopting
// what is there, overwriting nothing, and T never decreases. Encrypted
// too: the successor decrypts the object it finds to adopt it.
func TestASuccessorFinishesAfterEachCrashPoint(t *testing.T) {
	keys, err := ArchiveKeys([]byte("7 " + strings.Repeat("77", 32)))
	if err != nil {
		t.Fatal(err)
	}
	for _, crash := range []string{"plan", ".parquet", ManifestDir, "encrypted/plan", "encrypted/.parquet", "encrypted/" + ManifestDir} {
		t.Run(crash, func(t *testing.T) {
			w := newWorkerWorld(t)
			if c, ok := strings.CutPrefix(crash, "encrypted/"); ok {
				crash, w.keys = c, keys
			}
			w.log.grow(300, w.now)
			ctx, stop := context.WithCancel(context.Background())
			first, l1 := w.worker(t, "first", &crashingStore{Store: w.store, after: crash, stop: stop})
			if crash == "plan" {
				// Stop as the plan is recorded: the transaction lands, the
				// upload does not happen.
				go func() {
					for ctx.Err() == nil {
						if p, _ := readPlan(context.Background(), w.cli); p.ModRevision != 0 {
							stop()
						}
						time.Sleep(time.Millisecond)
					}
				}()
			}
			var tBefore uint64
			for ctx.Err() == nil {
				tBefore = w.head(t).T
				if err := first.Pass(ctx, l1); err != nil && ctx.Err() == nil {
					t.Fatal(err)
				}
			}
			plan, err := readPlan(context.Background(), w.cli)
			if err != nil {
				t.Fatal(err)
			}
			if crash != "plan" && plan.ModRevision == 0 {
				t.Fatalf("no plan left after a crash after %s", crash)
			}
			objects, _ := w.store.List(context.Background(), "")
			before := map[string][]byte{}
			for _, o := range objects {
				before[o.Key], _ = w.store.Get(context.Background(), o.Key)
			}
			second, l2 := w.worker(t, "second", w.store)
			w.now = w.now.Add(time.Minute)
			for range 20 {
				if err := second.Pass(context.Background(), l2); err != nil {
					t.Fatal(err)
				}
				if h := w.head(t); h.T < tBefore {
					t.Fatalf("T went back from %d to %d", tBefore, h.T)
				}
			}
			if h := w.head(t); h.T != 300 {
				t.Fatalf("T %d, want 300", h.T)
			}
			for key, data := range before {
				if now, err := w.store.Get(context.Background(), key); err != nil || !bytes.Equal(now, data) {
					t.Fatalf("%s changed after the crash: %v", key, err)
				}
			}
			w.checkArchive(t)
		})
	}
}

// TestWorkerHaltsOnAConflictingObject: an object under the planned key
// with other rows halts the worker and is left as it is.
func TestWorkerHaltsOnAConflictingObject(t *testing.T) {
	w := newWorkerWorld(t)
	w.log.grow(50, w.now)
	w.now = w.now.Add(time.Minute)
	ctx := context.Background()
	// Publish [0, 50) from another log into the same keys first.
	other := newWorkerWorld(t)
	other.store, other.now = w.store, w.now
	other.log.grow(50, w.now.Add(-time.Minute)) // as old as w's
	other.log.messages[11].Message.Value = []byte("different")
	owk, ol := other.worker(t, "other", w.store)
	if err := owk.Pass(ctx, ol); err != nil {
		t.Fatal(err)
	}
	key := "dt=2026-12-02/00000000000000000000-00000000000000000049.parquet"
	data, err := w.store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wk, l := w.worker(t, "a", w.store)
	if err := wk.Pass(ctx, l); !errors.Is(err, ErrConflict) {
		t.Fatalf("pass over a conflicting object: %v, want ErrConflict", err)
	}
	if now, _ := w.store.Get(ctx, key); !bytes.Equal(now, data) {
		t.Fatal("the conflicting object was overwritten")
	}
	if h := w.head(t); h.T != 0 {
		t.Fatalf("T moved to %d over a conflict", h.T)
	}
	entries, _ := os.ReadDir(filepath.Join(w.dir, "tmp-a"))
	if len(entries) != 0 {
		t.Fatalf("the worker left %d local files", len(entries))
	}
}

// TestAnEncryptingWorkerCountsAnObjectAdoptedInClear: a worker that
// encrypts and finds, after a 412, an object in clear holding the same
// rows (its predecessor wrote it before encryption was turned on) adopts
// it, as it must (nothing is overwritten), but warns and counts it in
// orderlog_tiering_adopted_in_clear_total; an encrypted object found so
// is not counted.
func TestAnEncryptingWorkerCountsAnObjectAdoptedInClear(t *testing.T) {
	keys, err := ArchiveKeys([]byte("7 " + strings.Repeat("77", 32)))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{"clear": 1, "encrypted": 0} {
		t.Run(name, func(t *testing.T) {
			w := newWorkerWorld(t)
			if name == "encrypted" {
				w.keys = keys
			}
			w.log.grow(300, w.now)
			ctx, stop := context.WithCancel(context.Background())
			first, l1 := w.worker(t, "first", &crashingStore{Store: w.store, after: ".parquet", stop: stop})
			for ctx.Err() == nil {
				if err := first.Pass(ctx, l1); err != nil && ctx.Err() == nil {
					t.Fatal(err)
				}
			}
			w.keys = keys
			second, l2 := w.worker(t, "second", w.store)
			reg := prometheus.NewRegistry()
			second.cfg.Metrics = NewMetrics(reg)
			w.now = w.now.Add(time.Minute)
			for range 20 {
				if err := second.Pass(context.Background(), l2); err != nil {
					t.Fatal(err)
				}
			}
			if h := w.head(t); h.T != 300 {
				t.Fatalf("T %d, want 300", h.T)
			}
			if got := gathered(t, reg, "orderlog_tiering_adopted_in_clear_total"); got != want {
				t.Fatalf("orderlog_tiering_adopted_in_clear_total = %v, want %v", got, want)
			}
			w.checkArchive(t)
		})
	}
}

// gathered is the value of the counter or gauge name in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			m := f.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
