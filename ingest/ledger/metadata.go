package ledger

import (
	"encoding/json"
	"fmt"
)

// Versions of the JSON metadata encoding (docs/format/ledger-metadata.md).
// A record is written in the lowest version that expresses it: version 1
// when the ensemble has its intended size, version 2 (which adds
// intended_w) when it has fewer members — a degraded ensemble. A node that
// knows only version 1 then refuses exactly the records it would misread
// as fully replicated. Decoding rejects any other version.
const (
	MetadataVersion         = 1
	MetadataVersionDegraded = 2
)

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
	// MayHideThrough, in a store registration (never in ledger metadata),
	// says the store's journal was damaged and may have lost records of
	// ledgers up to this id (0: no damage): DamagedMember.
	MayHideThrough uint64 `json:"-"`
}

// Metadata is the etcd record of one ledger at keys.Ledger(ID).
//
// Invariants: W == len(Ensemble) ≤ IntendedW; LastEntry == -1 unless State is closed;
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
	// IntendedW is the ensemble size the ledger was meant to have (the
	// configured W). A ledger created with fewer live stores (at least A),
	// or one whose members lost their disks, has W < IntendedW until
	// re-replication copies it onto more stores. Zero on encode means W.
	IntendedW int   `json:"intended_w,omitempty"`
	State     State `json:"state"`
	// LastEntry is the last entry of a closed ledger; -1 for none (or not closed).
	LastEntry   int64  `json:"last_entry"`
	FirstOffset uint64 `json:"first_offset"`
	EndOffset   uint64 `json:"end_offset"`
	// Bytes is the entry payload bytes of entries 0..LastEntry, as the
	// writer counted them at its close (0: unknown, closed by a recovery).
	// ClosedAt is when it was closed (Unix milliseconds; 0: before this
	// field existed). Retention reads both (ingest/retention).
	Bytes    int64 `json:"bytes,omitempty"`
	ClosedAt int64 `json:"closed_at,omitempty"`
	// TopicBytes is what each topic's messages take in those entries, as
	// the writer counted them (topics.go); a topic's byte limit reads it.
	TopicBytes map[string]int64 `json:"topic_bytes,omitempty"`
	// Kind says what the ledger holds; "" for ledgers created before it
	// existed (and the sequencer's own).
	Kind Kind `json:"kind,omitempty"`

	// ModRevision is the etcd revision the record was read at; it is the
	// compare of the next state change. Not encoded.
	ModRevision int64 `json:"-"`
}

// Kind is what a ledger holds.
type Kind string

// KindIngest: an ingest node's ledger, producer snapshots and batches.
// Retention deletes one holding only snapshots once it is closed and no
// producer's state needs it.
const KindIngest Kind = "ingest"

// KindCheckpoint: a commit-log checkpoint ledger (the sequencer's).
// Retention deletes a closed one below the checkpoint pointer's
// first_ledger other than the pointer's own: no checkpoint names it.
const KindCheckpoint Kind = "checkpoint"

// KindRetained: a ledger of retention's retained set (messages kept below
// the log start at their offsets). Its offsets lie below every new
// leader's C₀, so a sequencer takeover does not close or read it.
const KindRetained Kind = "retained"

// Degraded reports whether the ensemble has fewer members than intended.
func (m Metadata) Degraded() bool { return m.W < m.IntendedW }

// HasOffsets reports whether the closed ledger covers any global offset.
func (m Metadata) HasOffsets() bool { return m.EndOffset > m.FirstOffset }

// withVersion fills IntendedW (zero means W) and sets Version to the
// version m is encoded in: the record as a decoder will read it back.
func (m Metadata) withVersion() Metadata {
	if m.IntendedW == 0 {
		m.IntendedW = m.W
	}
	m.Version = MetadataVersion
	if m.Degraded() {
		m.Version = MetadataVersionDegraded
	}
	return m
}

func encodeMetadata(m Metadata) ([]byte, error) {
	m = m.withVersion()
	if err := m.check(); err != nil {
		return nil, err
	}
	if m.Version == MetadataVersion {
		m.IntendedW = 0 // version 1 has no intended_w
	}
	return json.Marshal(m)
}

func decodeMetadata(b []byte, modRevision int64) (Metadata, error) {
	var m Metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return Metadata{}, fmt.Errorf("decode ledger metadata: %w", err)
	}
	switch {
	case m.Version == MetadataVersion && m.IntendedW == 0:
		m.IntendedW = m.W
	case m.Version == MetadataVersion:
		return Metadata{}, fmt.Errorf("decode ledger metadata: intended_w in a version %d record", m.Version)
	case m.Version != MetadataVersionDegraded:
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
	case m.IntendedW < m.W:
		return fmt.Errorf("intended W=%d below the %d ensemble members", m.IntendedW, m.W)
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
