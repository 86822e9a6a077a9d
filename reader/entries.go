package reader

import (
	"context"
	"fmt"
	"sort"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/ingest/batch"
	"orderlog/ingest/ledger"
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
	mu     struct {
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
