package reader

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/batch"
	"orderlog/ingest/ledger"
	"orderlog/ingest/wal"
)

// EntrySource reads one confirmed ledger entry's payload.
type EntrySource interface {
	ReadEntry(ctx context.Context, ledgerID uint64, entry int64) ([]byte, error)
}

// LedgerSource reads entries through the ledger client: metadata from etcd
// (cached; a ledger's ensemble never changes), then any ensemble member
// answering with a valid checksum.
type LedgerSource struct {
	etcd   *clientv3.Client
	stores ledger.Dialer
	// silent remembers stores whose reads timed out (a paused node):
	// reads try them last, so a tail does not wait a call timeout per
	// entry.
	silent ledger.SilentStores
	// local, when set, is the node's own WAL store: entries of ledgers it
	// holds are borrowed from it in place (borrowEntry).
	local LocalStore
	mu    struct {
		sync.Mutex
		meta map[uint64]ledger.Metadata
	}
}

// NewLedgerSource returns an EntrySource over ledgers.
func NewLedgerSource(etcd *clientv3.Client, stores ledger.Dialer) *LedgerSource {
	s := &LedgerSource{etcd: etcd, stores: stores}
	s.mu.meta = make(map[uint64]ledger.Metadata)
	return s
}

// ReadEntry reads entry of ledgerID. The caller vouches that the entry is
// confirmed: the commit map named it.
func (s *LedgerSource) ReadEntry(ctx context.Context, ledgerID uint64, entry int64) ([]byte, error) {
	meta, err := s.metadata(ctx, ledgerID)
	if err != nil {
		return nil, err
	}
	r, err := ledger.NewReader(meta, entry, ledger.ReaderOptions{Stores: s.stores, Silent: &s.silent})
	if err != nil {
		return nil, err
	}
	e, err := r.Read(ctx, entry)
	if err != nil {
		return nil, err
	}
	return e.Payload, nil
}

// LocalStore is the node's own WAL store (a *wal.Store), which lends
// entries of its sealed segments without copying them (wal.Store.Borrow).
type LocalStore interface {
	StoreID() string
	Incarnation() uint64
	Borrow(ledger uint64, entry int64) (wal.ReadResult, *wal.Lease)
}

// UseLocalStore makes the source borrow the entries of ledgers whose
// ensemble holds store's current incarnation from it, in place; every
// other entry, and any the store does not answer PRESENT for, is read as
// ReadEntry reads it. Call it before the first read.
func (s *LedgerSource) UseLocalStore(store LocalStore) { s.local = store }

// borrowEntry is ReadEntry for the reader's pages: the payload may alias
// the local store's mapping of a sealed segment, valid until lease is
// released (nil lease: the payload is the caller's).
func (s *LedgerSource) borrowEntry(ctx context.Context, ledgerID uint64, entry int64) (payload []byte, lease entryLease, err error) {
	if s.local != nil {
		meta, err := s.metadata(ctx, ledgerID)
		if err != nil {
			return nil, nil, err
		}
		if s.holdsLocally(meta) {
			r, lease := s.local.Borrow(ledgerID, entry)
			if r.Status == wal.Present && lease.Borrowed() {
				return r.Payload, lease, nil
			}
			if r.Status == wal.Present {
				return r.Payload, nil, nil // a copy (the active segment)
			}
			lease.Release()
		}
	}
	payload, err = s.ReadEntry(ctx, ledgerID, entry)
	return payload, nil, err
}

// holdsLocally reports whether the local store, in its current
// incarnation, is a member of the ledger's ensemble (a store answers only
// for the incarnation a ledger names, as the WAL service does).
func (s *LedgerSource) holdsLocally(meta ledger.Metadata) bool {
	for _, m := range meta.Ensemble {
		if m.StoreID == s.local.StoreID() && m.Incarnation == s.local.Incarnation() {
			return true
		}
	}
	return false
}

// entryBorrower is an EntrySource that can lend entries (LedgerSource).
// A nil lease means the payload is the caller's.
type entryBorrower interface {
	borrowEntry(ctx context.Context, ledgerID uint64, entry int64) ([]byte, entryLease, error)
}

// entryLease gives a borrowed payload back (a *wal.Lease).
type entryLease interface{ Release() }

func (s *LedgerSource) metadata(ctx context.Context, ledgerID uint64) (ledger.Metadata, error) {
	s.mu.Lock()
	meta, ok := s.mu.meta[ledgerID]
	s.mu.Unlock()
	if ok {
		return meta, nil
	}
	meta, err := ledger.Get(ctx, s.etcd, ledgerID)
	if err != nil {
		return ledger.Metadata{}, fmt.Errorf("ledger %d metadata: %w", ledgerID, err)
	}
	s.mu.Lock()
	s.mu.meta[ledgerID] = meta
	s.mu.Unlock()
	return meta, nil
}

// decodedEntry is one Written segment's batch. Immutable once decoded:
// pages alias its records' bytes, and entryCache shares it between reads.
type decodedEntry struct {
	header  batch.Header
	records []batch.Record
	// runEnds[k] is the index of the first record after run k.
	runEnds      []int
	payloadBytes int
	// lease keeps the mapped WAL bytes the records alias valid (nil: the
	// payload is on the heap). refs counts the entry's holders while it
	// has one: the cache, and every page being built or sent that aliases
	// it (entryPins); the last release returns the lease.
	lease entryLease
	refs  atomic.Int32
}

// hold adds a holder; only while the entry has one already (the cache's,
// under its lock, or the caller's own).
func (e *decodedEntry) hold() {
	if e.lease != nil {
		e.refs.Add(1)
	}
}

// release drops a holder; the last one returns the mapped bytes.
func (e *decodedEntry) release() {
	if e.lease != nil && e.refs.Add(-1) == 0 {
		e.lease.Release()
	}
}

// entryPins are the borrowed entries a page aliases, one hold each: they
// are released once the page is sent (Stream) or copied out (ReadPage).
type entryPins struct {
	entries []*decodedEntry
}

// add takes over the caller's hold of e.
func (p *entryPins) add(e *decodedEntry) {
	if e.lease != nil {
		p.entries = append(p.entries, e)
	}
}

func (p *entryPins) borrowed() bool { return len(p.entries) > 0 }

func (p *entryPins) release() {
	for _, e := range p.entries {
		e.release()
	}
	p.entries = nil
}

// decodeEntry decodes the batch a segment names.
func decodeEntry(payload []byte, seg Segment) (*decodedEntry, error) {
	d, err := batch.Decode(payload)
	if err != nil {
		return nil, fmt.Errorf("ledger %d entry %d: %w", seg.Ledger, seg.Entry, err)
	}
	header := d.Header
	records, err := d.All()
	if err != nil {
		return nil, fmt.Errorf("ledger %d entry %d: %w", seg.Ledger, seg.Entry, err)
	}
	e := &decodedEntry{header: header, records: records, runEnds: make([]int, len(header.Runs)), payloadBytes: len(payload)}
	end := 0
	for k, run := range header.Runs {
		end += int(run.Count)
		e.runEnds[k] = end
	}
	return e, nil
}

// check reports whether the batch holds exactly the segment's offsets: the
// commit map and the stored bytes must agree.
func (e *decodedEntry) check(seg Segment) error {
	if e.header.FirstOffset != seg.First || e.header.EndOffset() != seg.End {
		return fmt.Errorf("%w: ledger %d entry %d holds [%d, %d), commit map says [%d, %d)",
			ErrConflict, seg.Ledger, seg.Entry, e.header.FirstOffset, e.header.EndOffset(), seg.First, seg.End)
	}
	return nil
}

// producerOf returns the producer id and seq of record i of the batch.
func (e *decodedEntry) producerOf(i int) (id, seq uint64) {
	k := sort.SearchInts(e.runEnds, i+1)
	if k == len(e.runEnds) {
		return 0, 0
	}
	run := e.header.Runs[k]
	return run.ProducerID, run.FirstSeq + uint64(i-(e.runEnds[k]-int(run.Count)))
}
