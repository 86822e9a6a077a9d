package retention

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

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

// swapRetained writes next if the pointer is still as prev was read.
func swapRetained(ctx context.Context, cli *clientv3.Client, prev, next Retained) error {
	next.Version = retainedVersion
	value, err := json.Marshal(next)
	if err != nil {
		return err
	}
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(keys.Retained), "=", prev.ModRevision)).
		Then(clientv3.OpPut(keys.Retained, string(value))).Commit()
	if err != nil {
		return fmt.Errorf("switch the retained set: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("switch the retained set: %w", errRaced)
	}
	return nil
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
	if n <= 0 || count > uint64(len(buf)) { // each span takes at least two bytes
		return nil, fmt.Errorf("%w: count", ErrBadIndex)
	}
	buf = buf[n:]
	spans := make([]IndexSpan, 0, count)
	var prevEnd uint64
	for range count {
		gap, n1 := binary.Uvarint(buf)
		if n1 <= 0 {
			return nil, fmt.Errorf("%w: truncated", ErrBadIndex)
		}
		length, n2 := binary.Uvarint(buf[n1:])
		if n2 <= 0 || length == 0 || prevEnd+gap < prevEnd || prevEnd+gap+length < prevEnd+gap {
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
