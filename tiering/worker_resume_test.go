package tiering

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"orderlog/internal/keys"
	"orderlog/proto/orderlogpb"
	"orderlog/tiering/objstore"
)

// TestARecordedPlanBeyondCWaits: a successor whose reader has not yet
// caught up with a recorded plan's end waits for it instead of halting,
// then publishes the plan's range under its keys.
func TestARecordedPlanBeyondCWaits(t *testing.T) {
	ctx := context.Background()
	w := newWorkerWorld(t)
	wk, l := w.worker(t, "a", w.store)
	if err := wk.Pass(ctx, l); err != nil { // creates the head at 0
		t.Fatal(err)
	}
	head := w.head(t)
	plan := Plan{Version: stateVersion, Epoch: 1, First: 0, End: 80,
		Object: "dt=2026-12-02/00000000000000000000-00000000000000000079.parquet", Manifest: manifestKey(0, 80)}
	if _, err := putPlan(ctx, w.cli, head, plan, l.key); err != nil {
		t.Fatal(err)
	}
	w.log.grow(50, w.now)
	if err := wk.Pass(ctx, l); err != nil {
		t.Fatalf("a pass with C=50 below the plan's end 80: %v, want a wait", err)
	}
	if h := w.head(t); h.T != 0 {
		t.Fatalf("T %d before C reached the plan's end", h.T)
	}
	w.log.grow(30, w.now)
	if err := wk.Pass(ctx, l); err != nil {
		t.Fatal(err)
	}
	if h := w.head(t); h.T != 80 || h.LastManifest != plan.Manifest {
		t.Fatalf("head %+v, want T 80 at the plan's manifest", h)
	}
	if _, err := w.store.Size(ctx, plan.Object); err != nil {
		t.Fatalf("the plan's object: %v", err)
	}
	w.checkArchive(t)
}

// downStore fails every object put while down is set.
type downStore struct {
	objstore.Store
	down atomic.Bool
}

func (s *downStore) PutIfAbsent(ctx context.Context, key string, body io.ReaderAt, size int64) error {
	if s.down.Load() {
		return errors.New("the object store is down")
	}
	return s.Store.PutIfAbsent(ctx, key, body, size)
}

// countingLog counts the log's page reads.
type countingLog struct {
	*memLog
	reads atomic.Int64
}

func (l *countingLog) ReadRaw(ctx context.Context, from uint64, limit int) (*orderlogpb.ReadResponse, error) {
	l.reads.Add(1)
	return l.memLog.ReadRaw(ctx, from, limit)
}

// TestAFailedUploadKeepsTheFile: a pass whose upload fails keeps the
// finished file and publishes it on a later pass without reading the log
// again.
func TestAFailedUploadKeepsTheFile(t *testing.T) {
	ctx := context.Background()
	w := newWorkerWorld(t)
	log := &countingLog{memLog: w.log}
	store := &downStore{Store: w.store}
	wk, l := w.worker(t, "a", store)
	wk.cfg.Log = log
	w.log.grow(100, w.now)
	w.now = w.now.Add(time.Minute)
	store.down.Store(true)
	if err := wk.Pass(ctx, l); err == nil {
		t.Fatal("a pass with the store down succeeded")
	}
	if l.ready == nil {
		t.Fatal("the finished file was not kept")
	}
	reads := log.reads.Load()
	if err := wk.Pass(ctx, l); err == nil {
		t.Fatal("a pass with the store down succeeded")
	}
	store.down.Store(false)
	if err := wk.Pass(ctx, l); err != nil {
		t.Fatal(err)
	}
	if n := log.reads.Load(); n != reads {
		t.Fatalf("the log was read %d more times to publish a kept file", n-reads)
	}
	if h := w.head(t); h.T == 0 || l.ready != nil {
		t.Fatalf("head %+v, kept %v: want the file published and let go", h, l.ready != nil)
	}
	w.checkArchive(t)
}

// TestANewArchiveStartsAtTheStartInEtcd: the head is created at the log
// start etcd holds, not at a reader's that has not loaded it yet.
func TestANewArchiveStartsAtTheStartInEtcd(t *testing.T) {
	ctx := context.Background()
	w := newWorkerWorld(t)
	if _, err := w.cli.Put(ctx, keys.LogStart, "20"); err != nil {
		t.Fatal(err)
	}
	wk, l := w.worker(t, "a", w.store) // its LogStart says 0
	if err := wk.Pass(ctx, l); err != nil {
		t.Fatal(err)
	}
	if h := w.head(t); h.First != 20 || h.T != 20 {
		t.Fatalf("head %+v, want the archive to begin at 20", h)
	}
}

// TestFailedPassesBackOff: pauses double from the interval up to
// maxBackoff while passes fail, and a success resets them.
func TestFailedPassesBackOff(t *testing.T) {
	failed := errors.New("the object store is down")
	pause := time.Second
	var got []time.Duration
	for range 6 {
		pause = nextPause(pause, time.Second, failed)
		got = append(got, pause)
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, maxBackoff, maxBackoff, maxBackoff}
	if !slices.Equal(got, want) {
		t.Fatalf("pauses %v, want %v", got, want)
	}
	if p := nextPause(pause, time.Second, nil); p != time.Second {
		t.Fatalf("pause after a success %v, want the interval", p)
	}
	if p := nextPause(time.Minute, time.Minute, failed); p != time.Minute {
		t.Fatalf("pause with an interval above the cap %v, want the interval", p)
	}
}

// TestTheManifestBoundsAreTheLeastAndGreatestIngestTimes: rows are not
// in ingest-time order (several ingest nodes); a file's manifest bounds
// are its rows' least and greatest times, which time queries skip by.
func TestTheManifestBoundsAreTheLeastAndGreatestIngestTimes(t *testing.T) {
	ctx := context.Background()
	w := newWorkerWorld(t)
	w.log.grow(40, w.now)
	w.log.messages[11].IngestTimeUs = w.now.Add(-time.Hour).UnixMicro() // an earlier time, later in offset order
	w.log.messages[20].IngestTimeUs = w.now.Add(time.Hour).UnixMicro()
	w.now = w.now.Add(2 * time.Hour)
	wk, l := w.worker(t, "a", w.store)
	if err := wk.Pass(ctx, l); err != nil {
		t.Fatal(err)
	}
	h := w.head(t)
	raw, err := w.store.Get(ctx, h.LastManifest)
	if err != nil {
		t.Fatal(err)
	}
	e, err := DecodeManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	if e.End != 40 || e.FirstIngestMicros != w.log.messages[11].IngestTimeUs || e.LastIngestMicros != w.log.messages[20].IngestTimeUs {
		t.Fatalf("manifest [%d, %d) ingest bounds %d..%d, want %d..%d", e.First, e.End, e.FirstIngestMicros, e.LastIngestMicros,
			w.log.messages[11].IngestTimeUs, w.log.messages[20].IngestTimeUs)
	}
}
