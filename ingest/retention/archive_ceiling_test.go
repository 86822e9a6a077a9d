package retention

import (
	"context"
	"testing"
	"time"

	"orderlog/ingest/ledger"
	"orderlog/internal/keys"
)

// TestAnArchiveCapsTheStartOnEveryNode: the archive's watermark caps the
// log start whether or not the node running retention archives itself
// (another node's tiering worker may be the elected one); with no archive
// at all, a node that does not archive moves the start freely, and one
// that does waits for its archive to begin.
func TestAnArchiveCapsTheStartOnEveryNode(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name         string
		head         *uint64 // the archive's T; nil: no archive yet
		awaitArchive bool
		want         uint64
	}{
		{name: "no archive, not archiving", want: 40},
		{name: "no archive, archiving", awaitArchive: true, want: 0},
		{name: "archive at 20, not archiving", head: ptr(uint64(20)), want: 20},
		{name: "archive at 20, archiving", head: ptr(uint64(20)), awaitArchive: true, want: 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newTestWorld(t)
			w.writeLedger(t, "a", ledger.Span{First: 0, End: 20})
			w.writeLedger(t, "b", ledger.Span{First: 20, End: 40})
			l3 := w.writeLedger(t, "a", ledger.Span{First: 40, End: 60})
			archived := func(ctx context.Context) (uint64, bool, error) {
				if tc.head == nil {
					return 0, false, nil
				}
				return *tc.head, true, nil
			}
			worker, err := New(Config{Etcd: w.cli, Stores: w, Name: "test", Policy: Policy{Bytes: l3.Bytes}, DeleteGrace: -1,
				Archived: archived, AwaitArchive: tc.awaitArchive,
				Committed: func() (uint64, bool) { return 60, true }, Now: time.Now})
			if err != nil {
				t.Fatal(err)
			}
			if err := worker.Pass(ctx); err != nil {
				t.Fatal(err)
			}
			if start, _, err := ReadStart(ctx, w.cli); err != nil || start != tc.want {
				t.Fatalf("log start %d, %v; want %d", start, err, tc.want)
			}
		})
	}
}

// TestAnUncappedMoveFailsIfAnArchiveBegan: a pass that found no archive
// moves the start only if none began before its move commits.
func TestAnUncappedMoveFailsIfAnArchiveBegan(t *testing.T) {
	ctx := context.Background()
	w := newTestWorld(t)
	w.writeLedger(t, "a", ledger.Span{First: 0, End: 20})
	l2 := w.writeLedger(t, "b", ledger.Span{First: 20, End: 40})
	archived := func(ctx context.Context) (uint64, bool, error) {
		// The archive begins at 0 just after this pass looked.
		if _, err := w.cli.Put(ctx, keys.TieringHead, `{"version":1,"first":0,"t":0}`); err != nil {
			return 0, false, err
		}
		return 0, false, nil
	}
	worker, err := New(Config{Etcd: w.cli, Stores: w, Name: "test", Policy: Policy{Bytes: l2.Bytes}, DeleteGrace: -1,
		Archived: archived, Committed: func() (uint64, bool) { return 40, true }, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Pass(ctx); err == nil {
		t.Fatal("the pass moved the start past an archive that began under it")
	}
	if start, _, err := ReadStart(ctx, w.cli); err != nil || start != 0 {
		t.Fatalf("log start %d, %v; want 0", start, err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestTheHotWindowAppliesWheneverAnArchiveExists: with an archive, the
// hot window is the age limit on a node that does not archive itself;
// without one it does not apply (nothing is deleted without a policy).
func TestTheHotWindowAppliesWheneverAnArchiveExists(t *testing.T) {
	ctx := context.Background()
	for _, archive := range []bool{false, true} {
		w := newTestWorld(t)
		w.writeLedger(t, "a", ledger.Span{First: 0, End: 20})
		w.writeLedger(t, "b", ledger.Span{First: 20, End: 40})
		archived := func(ctx context.Context) (uint64, bool, error) { return 40, archive, nil }
		worker, err := New(Config{Etcd: w.cli, Stores: w, Name: "test", DeleteGrace: -1, Archived: archived,
			HotWindow: time.Millisecond, Committed: func() (uint64, bool) { return 40, true },
			Now: func() time.Time { return time.Now().Add(time.Hour) }})
		if err != nil {
			t.Fatal(err)
		}
		if err := worker.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		start, _, err := ReadStart(ctx, w.cli)
		if err != nil {
			t.Fatal(err)
		}
		if moved := start > 0; moved != archive {
			t.Fatalf("archive %v: the start is %d", archive, start)
		}
	}
}
