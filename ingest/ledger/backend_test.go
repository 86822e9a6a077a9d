package ledger

import (
	"testing"

	"orderlog/ingest/wal"
	"orderlog/ingest/wal/walfs"
	"orderlog/proto/walpb"
)

// walBackend is a real ingest/wal store (real files, fsync before ack)
// served by wal.NewService.
type walBackend struct {
	store   *wal.Store
	service *wal.Service
}

func (b walBackend) server() walpb.WALServer { return b.service }
func (b walBackend) storeID() string         { return b.store.StoreID() }
func (b walBackend) incarnation() uint64     { return b.store.Incarnation() }
func (b walBackend) shutdown()               { _ = b.store.Close() }

func openWAL(t testing.TB, dir string) storeBackend {
	st, err := wal.Open(wal.Config{Dir: dir})
	if err != nil {
		t.Fatalf("open wal store in %s: %v", dir, err)
	}
	return walBackend{store: st, service: wal.NewService(st)}
}

// testBackend is the store implementation the protocol tests run against:
// the real WAL store.
func testBackend(t testing.TB) openBackend { return openWAL }

// openWALOn is openWAL with the store's files reached through fsys (a
// walfs.ErrorFS over the OS, say), so a test can make one store's disk fail.
func openWALOn(fsys walfs.FS) openBackend {
	return func(t testing.TB, dir string) storeBackend {
		st, err := wal.Open(wal.Config{Dir: dir, FS: fsys})
		if err != nil {
			t.Fatalf("open wal store in %s: %v", dir, err)
		}
		return walBackend{store: st, service: wal.NewService(st)}
	}
}
