package pipeline

import (
	"fmt"
	"slices"
	"time"
)

// Message is one accepted message waiting to be logged. Payload is opaque to
// the pipeline; Size is what it counts against the batch byte limit.
type Message struct {
	ProducerID uint64 // 0: sent without a producer session
	Epoch      uint64
	Seq        uint64
	Size       int
	Payload    any
}

// Span is a global offset range [First, End).
type Span struct{ First, End uint64 }

// Batch is the unit of one grant and one ledger entry.
type Batch struct {
	ID       uint64
	Ledger   uint64 // the ledger its grant was requested for
	Messages []Message
	bytes    int
	granted  bool
	refused  bool   // its grant request was refused
	First    uint64 // first offset, once granted
	queued   bool   // handed out in Ready.Appends
	appended bool
	acked    bool  // handed out in Ready.Acked (ack mode leader)
	Entry    int64 // ledger entry, once appended
	// AppendedAt is for the owner's metrics; the pipeline never reads it
	// (it reads no clock).
	AppendedAt time.Time
}

// Span is the batch's offset range; valid once granted.
func (b *Batch) Span() Span { return Span{b.First, b.First + uint64(len(b.Messages))} }

// GrantRequest asks the sequencer for Count offsets bound to Ledger.
type GrantRequest struct {
	BatchID uint64
	Ledger  uint64
	Count   int
}

// WrittenReport tells the sequencer that Span lies in Entry of Ledger.
type WrittenReport struct {
	Ledger uint64
	Entry  int64
	Span   Span
}

// UnusedReport tells the sequencer that no AddEntry was ever sent for Span.
type UnusedReport struct {
	Ledger uint64
	Span   Span
}

// Ready is what the owner must do next, in field order.
type Ready struct {
	GrantRequests []GrantRequest
	Appends       []*Batch // granted, in entry order; report each with Appended
	Written       []WrittenReport
	Unused        []UnusedReport
	// Acked are batches the writer's own store fsynced, not yet confirmed
	// at the ack quorum (LocallyDurable, ack mode leader): producers may be
	// told now. Each is still Logged later — or, if its ledger closes below
	// it, re-granted like any unconfirmed batch.
	Acked  []*Batch
	Logged []*Batch // durable: message i is at offset First+i
	// NeedLedger asks for a new ledger. It comes last because the new
	// ledger's entry 0 is a snapshot of the producer state: it must count
	// the batches Logged in the same Ready (a closed ledger's last entries
	// are logged in the Ready that asks for its successor), or a rebuild
	// from it forgets acknowledged seqs and logs them again.
	NeedLedger bool
	// Switched: a roll's next ledger takes the batches from now on (see
	// roll.go). It comes after Logged: the old ledger's last batches are
	// logged in it or before.
	Switched *Switch
}

// Empty reports whether there is nothing to do.
func (r Ready) Empty() bool {
	return !r.NeedLedger && r.Switched == nil && len(r.GrantRequests) == 0 && len(r.Appends) == 0 &&
		len(r.Written) == 0 && len(r.Unused) == 0 && len(r.Acked) == 0 && len(r.Logged) == 0
}

// Config bounds batches.
type Config struct {
	MaxBatchMessages int // messages in one batch
	MaxBatchBytes    int // payload bytes in one batch (a larger message still goes alone)
	MaxInFlight      int // sealed batches not yet logged
}

// Validate fills defaults.
func (c *Config) Validate() error {
	if c.MaxBatchMessages < 0 || c.MaxBatchBytes < 0 || c.MaxInFlight < 0 {
		return fmt.Errorf("pipeline: limits must not be negative")
	}
	if c.MaxBatchMessages == 0 {
		c.MaxBatchMessages = 8192
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = 1 << 20
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 3
	}
	return nil
}

type ledgerState int

const (
	noLedger ledgerState = iota // none open; one is needed when work waits
	ledgerOpening
	ledgerOpen
	ledgerFailing // closing: seal nothing until LedgerClosed
)

// Pipeline is the state machine. Not safe for concurrent use.
type Pipeline struct {
	cfg         Config
	waiting     []Message
	inFlight    []*Batch // sealed, not logged, in seal order
	orphans     map[uint64]*Batch
	ledger      uint64
	state       ledgerState
	nextBatchID uint64
	wantLedger  bool // a ledger is needed even without messages
	// rolling: a roll asked for the next ledger (NeedLedger) and it is not
	// open yet; next: the roll's ledger, open, taking no batch until the
	// current one drains (roll.go).
	rolling  bool
	rollFrom uint64 // the ledger open when the roll was asked
	next     uint64
	ready    Ready
}

// WantLedger asks for a ledger even if no message waits (the owner needs
// one to write a producer-state snapshot).
func (p *Pipeline) WantLedger() { p.wantLedger = true }

// New returns an idle pipeline with no ledger.
func New(cfg Config) (*Pipeline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Pipeline{cfg: cfg, orphans: make(map[uint64]*Batch)}, nil
}

// Add queues accepted messages, in the order given.
func (p *Pipeline) Add(messages ...Message) { p.waiting = append(p.waiting, messages...) }

// Withdraw removes the waiting (not yet sealed) messages for which match
// is true and returns them in order; they will never be granted or logged.
// Messages already sealed into a batch stay in it.
func (p *Pipeline) Withdraw(match func(Message) bool) []Message {
	var out []Message
	kept := p.waiting[:0]
	for _, m := range p.waiting {
		if match(m) {
			out = append(out, m)
		} else {
			kept = append(kept, m)
		}
	}
	clear(p.waiting[len(kept):])
	p.waiting = kept
	return out
}

// Waiting is the number of messages not yet sealed.
func (p *Pipeline) Waiting() int { return len(p.waiting) }

// InFlight is the number of sealed batches not yet logged.
func (p *Pipeline) InFlight() int { return len(p.inFlight) }

// Ledger is the ledger new batches are granted into (0 if none is open).
func (p *Pipeline) Ledger() uint64 {
	if p.state != ledgerOpen {
		return 0
	}
	return p.ledger
}

// Ready seals what it can and returns (and forgets) the pending outputs.
func (p *Pipeline) Ready() Ready {
	p.switchIfDrained()
	p.seal()
	if p.state == noLedger && (len(p.waiting) > 0 || len(p.inFlight) > 0 || p.wantLedger) {
		p.state = ledgerOpening // wantLedger stays set until the ledger is open
		p.ready.NeedLedger = true
	}
	out := p.ready
	p.ready = Ready{}
	return out
}

func (p *Pipeline) seal() {
	for p.state == ledgerOpen && p.next == 0 && len(p.waiting) > 0 && len(p.inFlight) < p.cfg.MaxInFlight {
		n, size := 0, 0
		for n < len(p.waiting) && n < p.cfg.MaxBatchMessages {
			if n > 0 && size+p.waiting[n].Size > p.cfg.MaxBatchBytes {
				break
			}
			size += p.waiting[n].Size
			n++
		}
		p.nextBatchID++
		// The batch gets a copy, so that the waiting queue's array is reused
		// instead of regrown behind every batch it gave away.
		b := &Batch{ID: p.nextBatchID, Ledger: p.ledger, Messages: slices.Clone(p.waiting[:n]),
			bytes: size, Entry: -1}
		rest := copy(p.waiting, p.waiting[n:])
		clear(p.waiting[rest:]) // the moved-from tail must not keep payloads alive
		p.waiting = p.waiting[:rest]
		p.inFlight = append(p.inFlight, b)
		p.ready.GrantRequests = append(p.ready.GrantRequests, GrantRequest{BatchID: b.ID, Ledger: b.Ledger, Count: n})
	}
}
