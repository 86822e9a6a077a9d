package sequencer

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of the machine's timeouts (docs/operations.md lists them with
// the flags that set them).
const (
	// DefaultGrantLease: a grant unresolved this long has its ledger closed.
	DefaultGrantLease = 3 * time.Second
	// DefaultSessionTimeout: a grant session silent this long is dead.
	DefaultSessionTimeout = time.Second
	// DefaultCloseTimeout: a writer asked to close a ledger has this long
	// before the sequencer recovers it.
	DefaultCloseTimeout = 200 * time.Millisecond
)

// MachineConfig tunes the grant/commit state machine. Durations are on the
// sequencer's monotonic clock.
type MachineConfig struct {
	// Epoch is this leader's fencing epoch (its election key's create revision).
	Epoch uint64
	// GrantLease is how long a grant may stay unresolved before its ledger is
	// asked to close.
	GrantLease time.Duration
	// SessionTimeout is how long a grant session may stay silent.
	SessionTimeout time.Duration
	// CloseTimeout is how long a writer has to close a ledger it was asked to
	// close before the sequencer recovers it.
	CloseTimeout time.Duration
	// MinReserveBlock is the smallest reservation extension, in offsets.
	MinReserveBlock uint64
	// ReserveAhead is how much recent traffic one reservation block covers.
	ReserveAhead time.Duration
	// MaxGrant is the largest count one grant request may ask for.
	MaxGrant uint64
}

// Validate fills defaults and rejects nonsense.
func (c *MachineConfig) Validate() error {
	if c.Epoch == 0 {
		return errors.New("sequencer: epoch must be > 0")
	}
	if c.GrantLease == 0 {
		c.GrantLease = DefaultGrantLease
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.MinReserveBlock == 0 {
		c.MinReserveBlock = 1 << 16
	}
	if c.ReserveAhead == 0 {
		c.ReserveAhead = 10 * time.Second
	}
	if c.MaxGrant == 0 {
		c.MaxGrant = 1 << 20
	}
	if c.GrantLease < 0 || c.SessionTimeout < 0 || c.CloseTimeout < 0 || c.ReserveAhead < 0 {
		return errors.New("sequencer: durations must be positive")
	}
	return nil
}

// LedgerRef names a ledger, its writer (ingest incarnation) and its epoch, as
// its etcd metadata says.
type LedgerRef struct {
	ID     uint64
	Writer string
	Epoch  uint64
}

// ClosedLedger is a closed ledger with the spans of its entries ≤ last.
type ClosedLedger struct {
	ID    uint64
	Spans []EntrySpan
}

// Takeover is what a new leader learned in steps 1–3 of §5: the committed
// watermark C₀ replayed from the previous commit ledgers, the reservation end
// R, every older-epoch ledger that is not closed, and every closed ledger
// whose offset range reaches C₀.
type Takeover struct {
	C0       uint64
	Reserved uint64
	// Unclosed are older-epoch ledgers in state open (Recovering false) or
	// recovering (Recovering true).
	Unclosed []UnclosedLedger
	Closed   []ClosedLedger
}

// UnclosedLedger is an older-epoch ledger that is open or half-recovered.
type UnclosedLedger struct {
	LedgerRef
	Recovering bool
}

type phase uint8

const (
	phaseTakeover  phase = iota // steps 4–5: closing older ledgers, resolving [C₀, R)
	phaseReserving              // step 6: first reservation above R requested
	phaseServing                // granting
	phaseDeposed                // a newer epoch exists; grants nothing
)

func (p phase) String() string {
	return [...]string{"takeover", "reserving", "serving", "deposed"}[p]
}

// Machine is the sequencer leader's grant/commit logic for one epoch. It does
// no I/O and reads no clock: every input carries the monotonic time, and
// Ready returns what the caller must do. Not safe for concurrent use.
//
// Output contract (like raft's Ready): append Records to the commit log in
// Seq order and report confirmation with Confirmed; send Grants to their
// sessions in order; only Published may be shown to readers.
type Machine struct {
	cfg   MachineConfig
	phase phase
	now   time.Duration

	sessions map[SessionID]*session
	current  map[string]SessionID // incarnation → its newest session
	gone     map[string]bool      // incarnations whose ingest key was deleted

	ledgers map[uint64]*ledgerInfo
	closing map[uint64]*ledgerInfo // ledgers in state closing, for the close timeout

	// olderPending counts older-epoch ledgers not yet closed (takeover).
	olderPending int
	// takeoverEnd is R as read at takeover: [C₀, takeoverEnd) belongs to
	// older epochs.
	takeoverEnd uint64

	segs segmentList
	// resolvedEnd is the end of the contiguous resolved prefix.
	resolvedEnd uint64
	// nextOffset is the next offset to grant; [resolvedEnd, nextOffset) is
	// covered by segs.
	nextOffset uint64

	res reservation

	pending []grantRequest

	nextSeq          uint64
	watermarkEmitted uint64
	watermarks       []pendingWatermark
	published        uint64

	out Ready
}

// Ready is what the caller must do after feeding inputs.
type Ready struct {
	// Grants are replies to grant requests, in the order they must be sent.
	Grants []GrantReply
	// Records must be appended to the commit log in order (by Seq).
	Records []Record
	// Closes ask writers to close a ledger at their LAC.
	Closes []CloseRequest
	// Recovers are ledgers to fence and recover through the ledger client;
	// report each result with LedgerClosed.
	Recovers []uint64
	// Reserve, if set, asks for the CAS seq/reserved: Expect → New (comparing
	// seq/epoch); report ReservationExtended or ReservationFailed.
	Reserve *Reservation
	// Published is the new committed watermark C, if HasPublished. It is
	// confirmed in the commit log.
	Published    uint64
	HasPublished bool
	// EndSessions are grant streams to end (superseded or timed out).
	EndSessions []SessionID
	// Violations are reports that contradict the sequencer's state; they
	// are ignored, never applied, and should be logged.
	Violations []error
}

// Empty reports whether r asks for nothing.
func (r *Ready) Empty() bool {
	return len(r.Grants) == 0 && len(r.Records) == 0 && len(r.Closes) == 0 &&
		len(r.Recovers) == 0 && r.Reserve == nil && !r.HasPublished &&
		len(r.EndSessions) == 0 && len(r.Violations) == 0
}

// CloseRequest asks the writer of Ledger to close it at its LAC. Session is
// the writer's current grant session, 0 if it has none.
type CloseRequest struct {
	Ledger  uint64
	Writer  string
	Session SessionID
}

// ErrViolation marks a report that contradicts the sequencer's state (for
// example Written for an offset not granted to that ledger). It is returned
// wrapped in Ready.Violations; the report is not applied.
var ErrViolation = errors.New("sequencer: protocol violation")

func (m *Machine) violation(format string, args ...any) {
	m.out.Violations = append(m.out.Violations,
		fmt.Errorf("%w: %s", ErrViolation, fmt.Sprintf(format, args...)))
}

// NewMachine starts the machine of a new leader at step 4 of §5.
func NewMachine(cfg MachineConfig, t Takeover, now time.Duration) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if t.Reserved < t.C0 {
		return nil, fmt.Errorf("sequencer: reserved %d below committed %d", t.Reserved, t.C0)
	}
	m := &Machine{
		cfg:              cfg,
		now:              now,
		sessions:         make(map[SessionID]*session),
		current:          make(map[string]SessionID),
		gone:             make(map[string]bool),
		ledgers:          make(map[uint64]*ledgerInfo),
		closing:          make(map[uint64]*ledgerInfo),
		takeoverEnd:      t.Reserved,
		resolvedEnd:      t.C0,
		nextOffset:       t.Reserved,
		watermarkEmitted: t.C0,
		published:        t.C0,
	}
	m.res = reservation{end: t.Reserved, rateStart: now}
	m.out.Published, m.out.HasPublished = t.C0, true
	if t.Reserved > t.C0 {
		m.segs.push(segment{Range: Range{t.C0, t.Reserved}})
	}
	for _, c := range t.Closed {
		m.ledgers[c.ID] = &ledgerInfo{LedgerRef: LedgerRef{ID: c.ID}, state: ledgerClosed}
		m.applyClosedSpans(c.ID, c.Spans, true)
	}
	for _, u := range t.Unclosed {
		if u.Epoch >= cfg.Epoch {
			return nil, fmt.Errorf("sequencer: ledger %d has epoch %d, not older than %d", u.ID, u.Epoch, cfg.Epoch)
		}
		l := &ledgerInfo{LedgerRef: u.LedgerRef, state: ledgerOpen}
		m.ledgers[u.ID] = l
		m.olderPending++
		if u.Recovering {
			l.state = ledgerRecovering
			m.out.Recovers = append(m.out.Recovers, u.ID)
		} else {
			m.startClose(l)
		}
	}
	if m.olderPending == 0 {
		m.holeRest(0)
	}
	m.advance()
	m.checkTakeover()
	return m, nil
}

// Epoch is the machine's fencing epoch.
func (m *Machine) Epoch() uint64 { return m.cfg.Epoch }

// Serving reports whether the machine grants (takeover finished, not deposed).
func (m *Machine) Serving() bool { return m.phase == phaseServing }

// PublishedC is the last published committed watermark.
func (m *Machine) PublishedC() uint64 { return m.published }

// Lease is the grant lease duration carried in grant replies.
func (m *Machine) Lease() time.Duration { return m.cfg.GrantLease }

// Ready returns the accumulated outputs and resets them. The slices stay
// valid only until the next call on the machine (their arrays are reused):
// copy what must outlive that.
func (m *Machine) Ready() Ready {
	m.emitWatermark()
	r := m.out
	m.out = Ready{Grants: r.Grants[:0], Records: r.Records[:0], Closes: r.Closes[:0],
		Recovers: r.Recovers[:0], EndSessions: r.EndSessions[:0]}
	return r
}

// Tick advances the monotonic clock: it ends silent sessions, recovers
// ledgers whose writer did not close them in time, asks to close ledgers
// holding an expired grant, and retries a failed reservation.
func (m *Machine) Tick(now time.Duration) {
	if now > m.now {
		m.now = now
	}
	if m.phase == phaseDeposed {
		return
	}
	m.expireSessions()
	m.expireCloses()
	m.expireLeases()
	m.res.sample(m.now, m.cfg.ReserveAhead)
	m.maybeReserve()
	m.drain()
}

// Deposed tells the machine a newer epoch exists (a CAS comparing seq/epoch
// failed, or the election key is gone). It refuses every grant from now on.
func (m *Machine) Deposed() {
	m.phase = phaseDeposed
	m.refuseAll(StatusNotLeader)
}

// checkTakeover moves from step 5 to step 6 once every older ledger is
// closed, [C₀, R) is resolved, and Watermark(R) is confirmed.
func (m *Machine) checkTakeover() {
	if m.phase != phaseTakeover {
		return
	}
	if m.olderPending > 0 || m.published < m.takeoverEnd {
		return
	}
	m.phase = phaseReserving
	m.maybeReserve()
}
