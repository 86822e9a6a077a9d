package sequencer

import (
	"cmp"
	"fmt"
	"maps"
	"orderlog/internal/scripttest"
	"slices"
	"strings"
)

// How transcripts print a Machine's outputs and state. One line per output;
// every line starts with what it is (grant, refuse, commit, close, recover,
// etcd, publish, end-session, violation). Grants and commit records keep
// the order the caller must keep; closes, recovers and ended streams carry
// no order (the machine collects them from maps) and are printed sorted.

// ready takes the machine's outputs and prints them.
func (e *machineEnv) ready(a *scripttest.Args, out *strings.Builder) error {
	if err := a.Done(); err != nil {
		return err
	}
	rd := e.m.Ready()
	if rd.Empty() {
		out.WriteString("ready: nothing to do\n")
		return nil
	}
	for _, g := range rd.Grants {
		e.printGrant(out, g)
	}
	for _, r := range rd.Records {
		printRecord(out, r)
		e.printedSeq = max(e.printedSeq, r.Seq)
	}
	slices.SortFunc(rd.Closes, func(a, b CloseRequest) int { return cmp.Compare(a.Ledger, b.Ledger) })
	slices.Sort(rd.Recovers)
	slices.Sort(rd.EndSessions)
	for _, c := range rd.Closes {
		fmt.Fprintf(out, "close ledger=%d writer=%s session=%s\n", c.Ledger, c.Writer, e.name(c.Session))
	}
	for _, id := range rd.Recovers {
		fmt.Fprintf(out, "recover ledger=%d\n", id)
	}
	if rd.Reserve != nil {
		asked := *rd.Reserve
		e.asked = &asked
		fmt.Fprintf(out, "etcd cas seq/reserved=%d -> %d if seq/epoch=%d\n", asked.Expect, asked.New, e.m.Epoch())
	}
	if rd.HasPublished {
		fmt.Fprintf(out, "publish C=%d\n", rd.Published)
	}
	for _, id := range rd.EndSessions {
		fmt.Fprintf(out, "end-session %s\n", e.name(id))
	}
	for _, err := range rd.Violations {
		fmt.Fprintf(out, "violation: %s\n", strings.TrimPrefix(err.Error(), ErrViolation.Error()+": "))
	}
	return nil
}

func (e *machineEnv) printGrant(out *strings.Builder, g GrantReply) {
	if g.Status == StatusGranted {
		fmt.Fprintf(out, "grant %s batch=%d ledger=%d offsets=%s\n", e.name(g.Session), g.RequestID, g.Ledger, g.Range)
		return
	}
	fmt.Fprintf(out, "refuse %s batch=%d ledger=%d: %s\n", e.name(g.Session), g.RequestID, g.Ledger, g.Status)
}

func printRecord(out *strings.Builder, r Record) {
	switch r.Kind {
	case KindWritten:
		fmt.Fprintf(out, "commit seq=%d written offsets=%s ledger=%d entry=%d\n", r.Seq, r.Range, r.Ledger, r.Entry)
	case KindHole:
		fmt.Fprintf(out, "commit seq=%d hole offsets=%s\n", r.Seq, r.Range)
	case KindWatermark:
		fmt.Fprintf(out, "commit seq=%d watermark C=%d\n", r.Seq, r.Watermark)
	default:
		fmt.Fprintf(out, "commit seq=%d %v\n", r.Seq, r)
	}
}

// name prints a stream as incarnation#id.
func (e *machineEnv) name(id SessionID) string {
	if id == 0 {
		return "none"
	}
	if n, ok := e.names[id]; ok {
		return n
	}
	return fmt.Sprintf("#%d", id)
}

// advance does what the printed outputs asked, as a caller that succeeds at
// everything: the asked reservation CAS succeeds and every printed commit
// record is confirmed. It prints the inputs it fed.
func (e *machineEnv) advance(a *scripttest.Args, out *strings.Builder) error {
	if err := a.Done(); err != nil {
		return err
	}
	if e.asked != nil {
		to := e.asked.New
		e.asked = nil
		fmt.Fprintf(out, "reserve ok to=%d\n", to)
		e.m.ReservationExtended(to)
	}
	if e.printedSeq > 0 {
		fmt.Fprintf(out, "confirm seq=%d\n", e.printedSeq)
		e.m.Confirmed(e.printedSeq)
	}
	if out.Len() == 0 {
		out.WriteString("advance: nothing asked\n")
	}
	return nil
}

// status prints the machine's state: phase, watermarks, reservation,
// streams, ledgers, unresolved offsets and waiting requests.
func (e *machineEnv) status(a *scripttest.Args, out *strings.Builder) error {
	if err := a.Done(); err != nil {
		return err
	}
	m := e.m
	fmt.Fprintf(out, "epoch=%d phase=%s now=%v\n", m.cfg.Epoch, m.phase, e.now)
	fmt.Fprintf(out, "C=%d resolved=%d next=%d R=%d", m.published, m.resolvedEnd, m.nextOffset, m.res.end)
	if m.res.inFlight {
		out.WriteString(" (extension in flight)")
	}
	out.WriteString("\n")
	for _, id := range slices.Sorted(maps.Keys(m.sessions)) {
		s := m.sessions[id]
		state := "alive"
		if !m.sessionAlive(s) {
			state = "dead"
		}
		fmt.Fprintf(out, "stream %s heard=%v %s\n", e.name(id), s.lastHeard, state)
	}
	for _, id := range slices.Sorted(maps.Keys(m.ledgers)) {
		l := m.ledgers[id]
		if l.Writer == "" && l.Epoch == 0 {
			// A closed ledger from the takeover: only its spans are known.
			fmt.Fprintf(out, "ledger %d %s (read at takeover)\n", id, ledgerStateName(l.state))
			continue
		}
		fmt.Fprintf(out, "ledger %d writer=%s epoch=%d %s\n", id, l.Writer, l.Epoch, ledgerStateName(l.state))
	}
	for _, s := range m.segs.live() {
		printSegment(out, s)
	}
	for _, r := range m.pending {
		fmt.Fprintf(out, "waiting %s batch=%d ledger=%d count=%d\n", e.name(r.session), r.requestID, r.ledger, r.count)
	}
	return nil
}

func printSegment(out *strings.Builder, s segment) {
	switch {
	case s.state == segWritten:
		fmt.Fprintf(out, "offsets %s written ledger=%d entry=%d\n", s.Range, s.ledger, s.entry)
	case s.state == segHole:
		fmt.Fprintf(out, "offsets %s hole\n", s.Range)
	case s.ledger == 0:
		fmt.Fprintf(out, "offsets %s granted by an older epoch\n", s.Range)
	default:
		fmt.Fprintf(out, "offsets %s granted ledger=%d lease-end=%v\n", s.Range, s.ledger, s.deadline)
	}
}

func ledgerStateName(s ledgerState) string {
	switch s {
	case ledgerOpen:
		return "open"
	case ledgerClosing:
		return "closing"
	case ledgerRecovering:
		return "recovering"
	case ledgerClosed:
		return "closed"
	}
	return fmt.Sprintf("state(%d)", s)
}
