package retention

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/keys"
)

// Retained is the etcd pointer to the current retained set
// (keys.Retained): the ledgers holding it, each closed, in offset order,
// and the offset below which it is complete. Version 1; format in
// docs/format/retained.md.
type Retained struct {
	Version int `json:"version"`
	// End: every message below End that a topic's policy keeps is in the
	// set; the set was built from the log up to End.
	End     uint64           `json:"end"`
	Ledgers []RetainedLedger `json:"ledgers,omitempty"`
	// Previous are the ledgers of the set this one replaced, switched at
	// SwitchedAt (Unix ms): kept for the deletion grace, as readers learn
	// the switch by a watch and may still read them.
	Previous   []uint64 `json:"previous,omitempty"`
	SwitchedAt int64    `json:"switched_at,omitempty"`
	// ModRevision is the key's revision when read (0: never written); not
	// encoded.
	ModRevision int64 `json:"-"`
}

// RetainedLedger is one ledger of the set: Entries batches (entries 0 ..
// Entries−1) holding offsets within [First, End), then its index as entry
// Entries.
type RetainedLedger struct {
	ID      uint64 `json:"id"`
	First   uint64 `json:"first"`
	End     uint64 `json:"end"`
	Entries int64  `json:"entries"`
}

const retainedVersion = 1

// ReadRetained reads the pointer (the zero Retained if none).
func ReadRetained(ctx context.Context, cli *clientv3.Client) (Retained, error) {
	resp, err := cli.Get(ctx, keys.Retained)
	if err != nil {
		return Retained{}, fmt.Errorf("read the retained set: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return Retained{}, nil
	}
	r, err := DecodeRetained(resp.Kvs[0].Value)
	r.ModRevision = resp.Kvs[0].ModRevision
	return r, err
}

// DecodeRetained decodes the pointer's value.
func DecodeRetained(value []byte) (Retained, error) {
	var r Retained
	if err := json.Unmarshal(value, &r); err != nil {
		return Retained{}, fmt.Errorf("retained set: %w", err)
	}
	if r.Version != retainedVersion {
		return Retained{}, fmt.Errorf("retained set: version %d unknown", r.Version)
	}
	return r, nil
}

// encodeRetained is the pointer's value.
func encodeRetained(r Retained) (string, error) {
	r.Version = retainedVersion
	value, err := json.Marshal(r)
	return string(value), err
}

// pinned are the set's ledgers, and the previous set's until the switch
// stood for grace.
func (r Retained) pinned(now time.Time, grace time.Duration) map[uint64]bool {
	out := r.ids()
	if now.Sub(time.UnixMilli(r.SwitchedAt)) < grace {
		for _, id := range r.Previous {
			out[id] = true
		}
	}
	return out
}

// ids are the set's ledger ids.
func (r Retained) ids() map[uint64]bool {
	out := make(map[uint64]bool, len(r.Ledgers))
	for _, l := range r.Ledgers {
		out[l.ID] = true
	}
	return out
}

// IndexSpan is one retained entry's offsets [First, End).
type IndexSpan struct{ First, End uint64 }

// indexMagic starts a retained ledger's index entry.
var indexMagic = [4]byte{'O', 'L', 'R', 'I'}

const indexVersion = 1

// EncodeIndex encodes a retained ledger's index entry: the magic, a
// version byte, uvarint count, then per entry uvarint (first − previous
// end) and uvarint (end − first).
func EncodeIndex(spans []IndexSpan) []byte {
	buf := append(indexMagic[:], indexVersion)
	buf = binary.AppendUvarint(buf, uint64(len(spans)))
	var prevEnd uint64
	for _, s := range spans {
		buf = binary.AppendUvarint(buf, s.First-prevEnd)
		buf = binary.AppendUvarint(buf, s.End-s.First)
		prevEnd = s.End
	}
	return buf
}

// overlong reports a varint of n bytes that has a shorter encoding: every
// index has exactly one encoding.
func overlong(buf []byte, n int) bool { return n > 1 && buf[n-1] == 0 }

// ErrBadIndex is returned for an index entry that does not decode.
var ErrBadIndex = errors.New("retention: bad retained index")

// DecodeIndex decodes an index entry; spans come back in order, each
// non-empty and after the one before.
func DecodeIndex(buf []byte) ([]IndexSpan, error) {
	if len(buf) < 5 || [4]byte(buf[:4]) != indexMagic || buf[4] != indexVersion {
		return nil, fmt.Errorf("%w: header", ErrBadIndex)
	}
	buf = buf[5:]
	count, n := binary.Uvarint(buf)
	if n <= 0 || overlong(buf, n) || count > uint64(len(buf)) { // each span takes at least two bytes
		return nil, fmt.Errorf("%w: count", ErrBadIndex)
	}
	buf = buf[n:]
	spans := make([]IndexSpan, 0, count)
	var prevEnd uint64
	for range count {
		gap, n1 := binary.Uvarint(buf)
		if n1 <= 0 || overlong(buf, n1) {
			return nil, fmt.Errorf("%w: truncated", ErrBadIndex)
		}
		length, n2 := binary.Uvarint(buf[n1:])
		if n2 <= 0 || overlong(buf[n1:], n2) || length == 0 || prevEnd+gap < prevEnd || prevEnd+gap+length < prevEnd+gap {
			return nil, fmt.Errorf("%w: span", ErrBadIndex)
		}
		first := prevEnd + gap
		spans = append(spans, IndexSpan{First: first, End: first + length})
		prevEnd = first + length
		buf = buf[n1+n2:]
	}
	if len(buf) != 0 {
		return nil, fmt.Errorf("%w: trailing bytes", ErrBadIndex)
	}
	return spans, nil
}
