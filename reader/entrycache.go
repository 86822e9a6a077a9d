package reader

import (
	"context"
	"sync"

	"orderlog/internal/apierr"
)

// entryCache keeps the ledger entries the Reader decoded last, for every
// read of it. A page of 1,000 messages of 1 KiB ends inside an entry of up
// to 1 MiB, and without the cache the next page read and decoded that entry
// again (every full read read its log twice); tails at the head of the log
// all read the same newest entries.
//
// A confirmed entry never changes, so an entry is keyed by its ledger and
// id alone; every use still checks it against the commit map's segment
// (decodeSegmentEntry's check). Entries are immutable once decoded: pages
// alias their records' bytes.
type entryCache struct {
	mu struct {
		sync.Mutex
		entries []cachedEntry // the least recently used first
		bytes   int           // payload bytes of entries
	}
}

// The cache's bounds: entries and their payload bytes (the decoded records
// add about a tenth of that for 1 KiB messages).
const (
	cachedEntries      = 64
	cachedEntriesBytes = 32 << 20
)

type cachedEntry struct {
	ledger  uint64
	entry   int64
	decoded *decodedEntry
}

// get returns the entry if it is cached, held for the caller (release it),
// and makes it the most recently used.
func (c *entryCache) get(ledgerID uint64, entry int64) *decodedEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.mu.entries) - 1; i >= 0; i-- {
		if e := c.mu.entries[i]; e.ledger == ledgerID && e.entry == entry {
			c.mu.entries = append(append(c.mu.entries[:i], c.mu.entries[i+1:]...), e)
			e.decoded.hold() // the cache's hold keeps it alive meanwhile
			return e.decoded
		}
	}
	return nil
}

// put adds an entry with a hold of the cache's own, dropping the least
// recently used beyond the bounds (and their holds).
func (c *entryCache) put(ledgerID uint64, entry int64, decoded *decodedEntry) {
	decoded.hold()
	var dropped []cachedEntry
	c.mu.Lock()
	c.mu.entries = append(c.mu.entries, cachedEntry{ledger: ledgerID, entry: entry, decoded: decoded})
	c.mu.bytes += decoded.payloadBytes
	drop := 0
	for len(c.mu.entries)-drop > 1 && (len(c.mu.entries)-drop > cachedEntries || c.mu.bytes > cachedEntriesBytes) {
		c.mu.bytes -= c.mu.entries[drop].decoded.payloadBytes
		drop++
	}
	if drop > 0 {
		dropped = append(dropped, c.mu.entries[:drop]...)
		c.mu.entries = append(c.mu.entries[:0], c.mu.entries[drop:]...)
	}
	c.mu.Unlock()
	for _, e := range dropped {
		e.decoded.release()
	}
}

// segmentEntry returns the decoded entry of a Written segment, from the
// cache or read and decoded, checked against the segment. The page that
// aliases it holds it through pins.
func (r *Reader) segmentEntry(ctx context.Context, seg Segment, pins *entryPins) (*decodedEntry, error) {
	entry := r.decoded.get(seg.Ledger, seg.Entry)
	if entry == nil {
		payload, lease, err := r.readEntry(ctx, seg)
		if err != nil {
			return nil, apierr.New(apierr.Unavailable, "read ledger %d entry %d: %v", seg.Ledger, seg.Entry, err)
		}
		if entry, err = decodeEntry(payload, seg); err != nil {
			if lease != nil {
				lease.Release()
			}
			return nil, &apierr.Error{Code: apierr.Internal, Message: err.Error()}
		}
		if entry.lease = lease; lease != nil {
			entry.refs.Store(1) // the caller's, handed to pins below
		}
		r.decoded.put(seg.Ledger, seg.Entry, entry)
	}
	pins.add(entry)
	if err := entry.check(seg); err != nil {
		return nil, &apierr.Error{Code: apierr.Internal, Message: err.Error()}
	}
	return entry, nil
}

// readEntry reads a segment's entry, borrowing it in place when the source
// can lend it (a nil lease: the payload is the reader's).
func (r *Reader) readEntry(ctx context.Context, seg Segment) ([]byte, entryLease, error) {
	if b, ok := r.entries.(entryBorrower); ok {
		return b.borrowEntry(ctx, seg.Ledger, seg.Entry)
	}
	payload, err := r.entries.ReadEntry(ctx, seg.Ledger, seg.Entry)
	return payload, nil, err
}
