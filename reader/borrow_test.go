package reader

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"orderlog/ingest/batch"
	"orderlog/proto/orderlogpb"
)

// lendingEntries lends copies of memEntries' payloads as a local WAL store
// lends mapped bytes: each lease, once released, overwrites its bytes (as
// if unmapped), so a page that still aliased them reads garbage.
type lendingEntries struct {
	memEntries
	out   atomic.Int64 // leases not yet released
	lent  atomic.Int64
	mu    sync.Mutex
	freed int
}

type poisoningLease struct {
	source   *lendingEntries
	bytes    []byte
	released atomic.Bool
}

func (l *poisoningLease) Release() {
	if l.released.Swap(true) {
		panic("lease released twice")
	}
	for i := range l.bytes {
		l.bytes[i] = 0xEE
	}
	l.source.out.Add(-1)
}

func (e *lendingEntries) borrowEntry(ctx context.Context, ledgerID uint64, entry int64) ([]byte, entryLease, error) {
	p, err := e.ReadEntry(ctx, ledgerID, entry)
	if err != nil {
		return nil, nil, err
	}
	lent := bytes.Clone(p)
	e.out.Add(1)
	e.lent.Add(1)
	return lent, &poisoningLease{source: e, bytes: lent}, nil
}

// lendingFixture commits entriesN entries of perEntry messages, message k
// of entry i valued "i/k", from a lending source.
func lendingFixture(t *testing.T, entriesN, perEntry int) (*Reader, *lendingEntries) {
	t.Helper()
	source := &lendingEntries{memEntries: memEntries{}}
	commits := NewCommitMap()
	for i := range int64(entriesN) {
		records := make([]batch.Record, perEntry)
		for k := range records {
			records[k] = batch.Record{Topic: "t", Key: []byte(fmt.Sprint(k)), Value: []byte(fmt.Sprintf("%d/%d", i, k)),
				Headers: []batch.MessageHeader{{Key: "h", Value: []byte(fmt.Sprint(i))}}}
		}
		first := uint64(i) * uint64(perEntry)
		p, err := batch.Encode(nil, batch.Header{Kind: batch.KindRecords, FirstOffset: first, Count: uint32(perEntry),
			Runs: []batch.ProducerRun{{ProducerID: 7, FirstSeq: first, Count: uint32(perEntry)}}}, records)
		if err != nil {
			t.Fatal(err)
		}
		source.memEntries[i] = p
		must(t, commits.Resolve(1, Segment{First: first, End: first + uint64(perEntry), Ledger: 1, Entry: i}))
	}
	must(t, commits.Advance(1, uint64(entriesN*perEntry)))
	return New(commits, source), source
}

// checkMessage reports whether m is message offset of a lendingFixture.
func checkMessage(m *orderlogpb.StoredMessage, offset uint64, perEntry int) error {
	i, k := offset/uint64(perEntry), offset%uint64(perEntry)
	msg := m.Message
	if m.Offset != offset || string(msg.Value) != fmt.Sprintf("%d/%d", i, k) || string(msg.Key) != fmt.Sprint(k) ||
		len(msg.Headers) != 1 || string(msg.Headers[0].Value) != fmt.Sprint(i) {
		return fmt.Errorf("message at %d = offset %d key %q value %q, want %d/%d", offset, m.Offset, msg.Key, msg.Value, i, k)
	}
	return nil
}

// TestBorrowedEntriesLiveUntilTheirPagesAreSent: two streams of pages
// ending inside entries read borrowed entries while the cache evicts them
// (more entries than it keeps); every message an emit sees is intact, and
// once the streams end only the cache's entries are still borrowed. Run
// with -race.
func TestBorrowedEntriesLiveUntilTheirPagesAreSent(t *testing.T) {
	const entriesN, perEntry = 3 * cachedEntries, 50
	r, source := lendingFixture(t, entriesN, perEntry)
	r.PageMessages = 70
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var next uint64
			err := r.Stream(context.Background(), 0, 0, Filter{}, false, func(p *orderlogpb.ReadResponse) error {
				for _, m := range p.Messages {
					if err := checkMessage(m, next, perEntry); err != nil {
						return err
					}
					next++
				}
				return nil
			})
			if err != nil || next != entriesN*perEntry {
				t.Errorf("stream delivered up to %d: %v", next, err)
			}
		}()
	}
	wg.Wait()
	r.decoded.mu.Lock()
	cached := int64(len(r.decoded.mu.entries))
	r.decoded.mu.Unlock()
	if source.lent.Load() < entriesN {
		t.Fatalf("%d entries lent, want at least %d", source.lent.Load(), entriesN)
	}
	if out := source.out.Load(); out != cached {
		t.Fatalf("%d leases outstanding after the streams, %d entries cached", out, cached)
	}
}

// TestReadPageCopiesBorrowedMessages: a page from ReadPage is the caller's:
// after every lease it was read from is given back (the cache evicted its
// entries), its messages are intact.
func TestReadPageCopiesBorrowedMessages(t *testing.T) {
	const entriesN, perEntry = 2 * cachedEntries, 20
	r, source := lendingFixture(t, entriesN, perEntry)
	page, err := r.ReadPage(context.Background(), 5, 30, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	// Evict everything the page was read from.
	for from := uint64(cachedEntries * perEntry); from < entriesN*perEntry; from += perEntry {
		if _, err := r.ReadPage(context.Background(), from, perEntry, Filter{}); err != nil {
			t.Fatal(err)
		}
	}
	if out := source.out.Load(); out > cachedEntries {
		t.Fatalf("%d leases outstanding, more than the cache holds", out)
	}
	for e := range 2 {
		if r.decoded.get(1, int64(e)) != nil {
			t.Fatalf("entry %d still cached", e)
		}
	}
	if len(page.Messages) != 30 {
		t.Fatalf("page of %d messages", len(page.Messages))
	}
	for i, m := range page.Messages {
		if err := checkMessage(m, 5+uint64(i), perEntry); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStreamGivesBackLeasesWhenEmitFails: a stream that ends with emit's
// error still gives back every lease of the pages read ahead.
func TestStreamGivesBackLeasesWhenEmitFails(t *testing.T) {
	const entriesN, perEntry = 8, 10
	r, source := lendingFixture(t, entriesN, perEntry)
	r.PageMessages = 5
	stop := fmt.Errorf("enough")
	err := r.Stream(context.Background(), 0, 0, Filter{}, false, func(p *orderlogpb.ReadResponse) error { return stop })
	if err != stop {
		t.Fatalf("stream = %v", err)
	}
	r.decoded.mu.Lock()
	cached := int64(len(r.decoded.mu.entries))
	r.decoded.mu.Unlock()
	if out := source.out.Load(); out != cached {
		t.Fatalf("%d leases outstanding, %d entries cached", out, cached)
	}
}
