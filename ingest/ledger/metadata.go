package ledger

import (
	"encoding/json"
	"fmt"
)

// MetadataVersion is the version of the JSON metadata encoding
// (docs/format/ledger-metadata.md). Decoding rejects any other version.
const MetadataVersion = 1

// State is a ledger's lifecycle state. It only moves forward:
// open → closed (the writer), or open → recovering → closed (anyone).
type State string

const (
	StateOpen       State = "open"
	StateRecovering State = "recovering"
	StateClosed     State = "closed"
)

// Member is one store of an ensemble, named with the incarnation the ledger
// was created on: a store that lost its disk is a different incarnation and
// answers UNKNOWN for this ledger.
type Member struct {
	StoreID     string `json:"store"`
	Incarnation uint64 `json:"incarnation"`
	Address     string `json:"addr"`
}

// Metadata is the etcd record of one ledger at keys.Ledger(ID).
//
// Invariants: W == len(Ensemble); LastEntry == -1 unless State is closed;
// [FirstOffset, EndOffset) is the hull of the non-empty spans of entries
// 0..LastEntry, empty (both 0) when none carries offsets.
type Metadata struct {
	Version           int      `json:"version"`
	ID                uint64   `json:"id"`
	WriterIncarnation string   `json:"writer"`
	Epoch             int64    `json:"epoch"`
	Ensemble          []Member `json:"ensemble"`
	W                 int      `json:"w"`
	A                 int      `json:"a"`
	State             State    `json:"state"`
	// LastEntry is the last entry of a closed ledger; -1 for none (or not closed).
	LastEntry   int64  `json:"last_entry"`
	FirstOffset uint64 `json:"first_offset"`
	EndOffset   uint64 `json:"end_offset"`

	// ModRevision is the etcd revision the record was read at; it is the
	// compare of the next state change. Not encoded.
	ModRevision int64 `json:"-"`
}

// HasOffsets reports whether the closed ledger covers any global offset.
func (m Metadata) HasOffsets() bool { return m.EndOffset > m.FirstOffset }

func encodeMetadata(m Metadata) ([]byte, error) {
	m.Version = MetadataVersion
	if err := m.check(); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

func decodeMetadata(b []byte, modRevision int64) (Metadata, error) {
	var m Metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return Metadata{}, fmt.Errorf("decode ledger metadata: %w", err)
	}
	if m.Version != MetadataVersion {
		return Metadata{}, fmt.Errorf("decode ledger metadata: unknown version %d", m.Version)
	}
	if err := m.check(); err != nil {
		return Metadata{}, fmt.Errorf("decode ledger metadata: %w", err)
	}
	m.ModRevision = modRevision
	return m, nil
}

func (m Metadata) check() error {
	switch {
	case m.W != len(m.Ensemble):
		return fmt.Errorf("W=%d but %d ensemble members", m.W, len(m.Ensemble))
	case m.A < 1 || m.A > m.W:
		return fmt.Errorf("A=%d outside [1, W=%d]", m.A, m.W)
	case m.State != StateOpen && m.State != StateRecovering && m.State != StateClosed:
		return fmt.Errorf("unknown state %q", m.State)
	case m.State != StateClosed && m.LastEntry != -1:
		return fmt.Errorf("last entry %d on a %s ledger", m.LastEntry, m.State)
	case m.LastEntry < -1:
		return fmt.Errorf("last entry %d", m.LastEntry)
	case m.EndOffset < m.FirstOffset:
		return fmt.Errorf("offset range [%d, %d) inverted", m.FirstOffset, m.EndOffset)
	}
	return nil
}
