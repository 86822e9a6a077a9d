package reader

import (
	"context"
	"sync"
	"testing"

	"orderlog/ingest/batch"
	"orderlog/proto/orderlogpb"
)

// countingEntries counts the reads of each entry of an EntrySource.
type countingEntries struct {
	source EntrySource
	mu     sync.Mutex
	reads  map[int64]int
}

func (c *countingEntries) ReadEntry(ctx context.Context, ledgerID uint64, entry int64) ([]byte, error) {
	c.mu.Lock()
	c.reads[entry]++
	c.mu.Unlock()
	return c.source.ReadEntry(ctx, ledgerID, entry)
}

// TestStreamReadsEachEntryOnce: pages of 64 messages over entries of 100
// end inside entries, and a stream still reads each entry once, delivering
// every offset once and in order.
func TestStreamReadsEachEntryOnce(t *testing.T) {
	const entriesN, perEntry = 10, 100
	entries := memEntries{}
	commits := NewCommitMap()
	for i := range int64(entriesN) {
		records := make([]batch.Record, perEntry)
		for k := range records {
			records[k] = batch.Record{Topic: "t", Value: []byte{byte(k)}}
		}
		first := uint64(i) * perEntry
		p, err := batch.Encode(nil, batch.Header{Kind: batch.KindRecords, FirstOffset: first, Count: perEntry,
			Runs: []batch.ProducerRun{{ProducerID: 7, FirstSeq: first, Count: perEntry}}}, records)
		if err != nil {
			t.Fatal(err)
		}
		entries[i] = p
		must(t, commits.Resolve(1, Segment{First: first, End: first + perEntry, Ledger: 1, Entry: i}))
	}
	must(t, commits.Advance(1, entriesN*perEntry))
	counted := &countingEntries{source: entries, reads: map[int64]int{}}
	r := New(commits, counted)
	r.PageMessages = 64
	var next uint64
	err := r.Stream(context.Background(), 0, 0, Filter{}, false, func(p *orderlogpb.ReadResponse) error {
		for _, m := range p.Messages {
			if m.Offset != next || m.ProducerSeq != next || m.Message.Value[0] != byte(next%perEntry) {
				t.Fatalf("message %v, want offset %d", m, next)
			}
			next++
		}
		return nil
	})
	if err != nil || next != entriesN*perEntry {
		t.Fatalf("stream delivered up to %d, %v", next, err)
	}
	for i := range int64(entriesN) {
		if counted.reads[i] != 1 {
			t.Errorf("entry %d read %d times, want once", i, counted.reads[i])
		}
	}
}

// TestEntryCacheKeepsItsBounds: the cache drops the least recently used
// entries beyond cachedEntries and beyond cachedEntriesBytes (always
// keeping the newest), and a lookup makes an entry the most recent.
func TestEntryCacheKeepsItsBounds(t *testing.T) {
	var c entryCache
	small := &decodedEntry{payloadBytes: 1}
	for i := range int64(cachedEntries + 3) { // drops three: 1, 2 and 3
		c.put(1, i, small)
		if i == 5 {
			c.get(1, 0) // entry 0 is now more recent than 1..5
		}
	}
	if len(c.mu.entries) != cachedEntries || c.get(1, 1) != nil || c.get(1, 3) != nil || c.get(1, 0) == nil || c.get(1, 4) == nil ||
		c.get(1, cachedEntries+2) == nil {
		t.Fatalf("after %d puts: %d entries; entry 1 cached %v, entry 0 cached %v", cachedEntries+3, len(c.mu.entries),
			c.get(1, 1) != nil, c.get(1, 0) != nil)
	}
	c.put(2, 0, &decodedEntry{payloadBytes: cachedEntriesBytes})
	if len(c.mu.entries) != 1 || c.mu.bytes != cachedEntriesBytes || c.get(2, 0) == nil {
		t.Fatalf("after a put of the whole byte bound: %d entries, %d bytes", len(c.mu.entries), c.mu.bytes)
	}
	c.put(2, 1, &decodedEntry{payloadBytes: 2 * cachedEntriesBytes})
	if len(c.mu.entries) != 1 || c.get(2, 1) == nil {
		t.Fatalf("an entry over the byte bound: %d entries", len(c.mu.entries))
	}
}
