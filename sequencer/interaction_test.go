package sequencer

import (
	"fmt"
	"orderlog/internal/scripttest"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestInteraction runs the transcripts in testdata/machine: scripts of inputs
// to a Machine with the outputs it must produce. docs/testing.md explains how
// to read them; `go test ./sequencer -run TestInteraction -rewrite` rewrites
// the expected output from what the machine does now.
//
// A block is a directive line, optionally more command lines, then `----`
// and the expected output. Every line is one command, run in order; the
// block's output is what its commands print (`ok` if none prints anything).
// The exception is `new`: its extra lines describe the takeover.
//
//	new epoch=5 [grant-lease=3s session-timeout=1s close-timeout=200ms
//	    min-block=65536 reserve-ahead=10s max-grant=1048576]
//	  takeover c0=0 reserved=0                    (C₀ and R read at takeover)
//	  unclosed ledger=3 writer=n0 epoch=4 [recovering]
//	  closed ledger=2 entries=0:[0,10),1:[10,20)  (spans of entries ≤ last)
//	session open incarnation=n1 [lease=7]        new grant stream n1#<id>
//	session close session=n1                     the stream ended
//	heartbeat session=n1                         an idle heartbeat arrived
//	incarnation gone incarnation=n1              ingest/n1 was deleted in etcd
//	ledger open id=1 writer=n1 epoch=5           ledger metadata read from etcd
//	ledger closed id=1 [entries=0:[0,10)]        closed (by writer or recovery)
//	grant session=n1 ledger=1 count=100 [batch=1] (default: the stream's last batch + 1)
//	written session=n1 ledger=1 entry=0 offsets=[0,100)
//	unused session=n1 ledger=1 offsets=[90,100)
//	reserve ok [to=N]                            the seq/reserved CAS succeeded
//	reserve failed                               it failed (not a newer epoch)
//	deposed                                      a newer epoch exists
//	confirm seq=N | confirm all                  commit records ≤ seq confirmed
//	tick +1s | tick to=3s [heartbeat=n1]         the monotonic clock moves
//	ready                                        print and take the outputs
//	advance                                      do what printed outputs asked
//	status                                       print the machine's state
//
// session=n1 names the newest stream the script opened for incarnation n1;
// session=n1#2 names stream 2 exactly (an older, superseded one).
func TestInteraction(t *testing.T) {
	datadriven.Walk(t, "testdata/machine", func(t *testing.T, path string) {
		env := newMachineEnv()
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			out, err := env.runBlock(td)
			if err != nil {
				td.Fatalf(t, "%v", err)
			}
			return out
		})
	})
}

// machineEnv is the world around one Machine in a transcript: the script's
// clock, the names of grant streams, and what the last Ready asked for.
type machineEnv struct {
	m   *Machine
	now time.Duration

	nextSession SessionID
	newest      map[string]SessionID // incarnation → newest stream the script opened
	names       map[SessionID]string // stream → "n1#2"
	nextBatch   map[SessionID]uint64 // default batch id per stream

	// asked is the newest reservation CAS printed by ready and not yet
	// answered; printedSeq the highest commit record seq printed.
	asked      *Reservation
	printedSeq uint64
}

func newMachineEnv() *machineEnv {
	return &machineEnv{
		newest:    make(map[string]SessionID),
		names:     make(map[SessionID]string),
		nextBatch: make(map[SessionID]uint64),
	}
}

func (e *machineEnv) runBlock(td *datadriven.TestData) (string, error) {
	if td.Cmd == "new" { // its input lines describe the takeover
		return e.newMachine(scripttest.NewArgs(td.Cmd, td.CmdArgs), td.Input)
	}
	return scripttest.RunBlock(td, e.run)
}

// run executes one command, printing to out.
func (e *machineEnv) run(a *scripttest.Args, out *strings.Builder) error {
	if e.m == nil {
		return fmt.Errorf("%s: no machine yet (start with new)", a.Cmd)
	}
	h := e.handler(a.Cmd)
	if h == nil {
		return fmt.Errorf("unknown command %q", a.Cmd)
	}
	return h(a, out)
}

func (e *machineEnv) handler(cmd string) func(*scripttest.Args, *strings.Builder) error {
	switch cmd {
	case "session":
		return e.session
	case "heartbeat":
		return e.heartbeat
	case "incarnation":
		return e.incarnation
	case "ledger":
		return e.ledger
	case "grant":
		return e.grant
	case "written":
		return e.written
	case "unused":
		return e.unused
	case "reserve":
		return e.reserve
	case "deposed":
		return e.deposed
	case "confirm":
		return e.confirm
	case "tick":
		return e.tick
	case "ready":
		return e.ready
	case "advance":
		return e.advance
	case "status":
		return e.status
	}
	return nil
}

// newMachine builds the machine of a new leader from its config and the
// takeover lines.
func (e *machineEnv) newMachine(a *scripttest.Args, input string) (string, error) {
	cfg := MachineConfig{
		Epoch:           a.MustUint("epoch"),
		GrantLease:      a.Duration("grant-lease", 0),
		SessionTimeout:  a.Duration("session-timeout", 0),
		CloseTimeout:    a.Duration("close-timeout", 0),
		MinReserveBlock: a.Uint("min-block", 0),
		ReserveAhead:    a.Duration("reserve-ahead", 0),
		MaxGrant:        a.Uint("max-grant", 0),
	}
	if err := a.Done(); err != nil {
		return "", err
	}
	var t Takeover
	for line := range strings.SplitSeq(input, "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		l, err := scripttest.ParseLine(line)
		if err != nil {
			return "", err
		}
		if err := addTakeoverLine(&t, l); err != nil {
			return "", err
		}
	}
	m, err := NewMachine(cfg, t, e.now)
	if err != nil {
		return fmt.Sprintf("error: %v\n", err), nil
	}
	e.m = m
	return "ok\n", nil
}

func addTakeoverLine(t *Takeover, a *scripttest.Args) error {
	switch a.Cmd {
	case "takeover":
		t.C0, t.Reserved = a.MustUint("c0"), a.MustUint("reserved")
	case "unclosed":
		ref := LedgerRef{ID: a.MustUint("ledger"), Writer: a.MustStr("writer"), Epoch: a.MustUint("epoch")}
		t.Unclosed = append(t.Unclosed, UnclosedLedger{LedgerRef: ref, Recovering: a.Flag("recovering")})
	case "closed":
		t.Closed = append(t.Closed, ClosedLedger{ID: a.MustUint("ledger"), Spans: entrySpans(a, "entries")})
	default:
		return fmt.Errorf("new: %q is not takeover, unclosed or closed", a.Cmd)
	}
	return a.Done()
}

func entrySpans(a *scripttest.Args, key string) []EntrySpan {
	v := a.Str(key, "")
	list, err := scripttest.ParseEntrySpans(v)
	if err != nil {
		a.Fail("%s=%s: %v", key, v, err)
	}
	var spans []EntrySpan
	for _, s := range list {
		spans = append(spans, EntrySpan{Entry: s.Entry, Range: Range{s.First, s.End}})
	}
	return spans
}

func scriptRange(a *scripttest.Args, key string) Range {
	first, end := a.Offsets(key)
	return Range{first, end}
}

// stream resolves session=n1 (newest stream of n1) or session=n1#2.
func (e *machineEnv) stream(a *scripttest.Args) SessionID {
	name := a.MustStr("session")
	if _, id, ok := strings.Cut(name, "#"); ok {
		var n uint64
		if _, err := fmt.Sscan(id, &n); err != nil {
			a.Fail("session=%s: bad stream number", name)
		}
		return SessionID(n)
	}
	id, ok := e.newest[name]
	if !ok { // Fail keeps the first problem
		a.Fail("session=%s: no stream opened for it", name)
	}
	return id
}

func (e *machineEnv) session(a *scripttest.Args, _ *strings.Builder) error {
	switch verb := a.Word(0); verb {
	case "open":
		incarnation := a.MustStr("incarnation")
		lease := a.Uint("lease", 0)
		if err := a.Done(); err != nil {
			return err
		}
		e.nextSession++
		id := e.nextSession
		e.newest[incarnation] = id
		e.names[id] = fmt.Sprintf("%s#%d", incarnation, id)
		e.m.SessionOpened(e.now, id, incarnation, int64(lease))
	case "close":
		id := e.stream(a)
		if err := a.Done(); err != nil {
			return err
		}
		e.m.SessionClosed(e.now, id)
	default:
		return fmt.Errorf("session %q: want open or close", verb)
	}
	return nil
}

func (e *machineEnv) heartbeat(a *scripttest.Args, _ *strings.Builder) error {
	id := e.stream(a)
	if err := a.Done(); err != nil {
		return err
	}
	e.m.Heard(e.now, id)
	return nil
}

func (e *machineEnv) incarnation(a *scripttest.Args, _ *strings.Builder) error {
	if verb := a.Word(0); verb != "gone" {
		return fmt.Errorf("incarnation %q: want gone", verb)
	}
	incarnation := a.MustStr("incarnation")
	if err := a.Done(); err != nil {
		return err
	}
	e.m.IncarnationGone(e.now, incarnation)
	return nil
}

func (e *machineEnv) ledger(a *scripttest.Args, out *strings.Builder) error {
	switch verb := a.Word(0); verb {
	case "open":
		ref := LedgerRef{ID: a.MustUint("id"), Writer: a.MustStr("writer"), Epoch: a.MustUint("epoch")}
		if err := a.Done(); err != nil {
			return err
		}
		e.m.LedgerOpened(ref)
	case "closed":
		id, spans := a.MustUint("id"), entrySpans(a, "entries")
		if err := a.Done(); err != nil {
			return err
		}
		e.m.LedgerClosed(e.now, id, spans)
	case "settled":
		id, writer := a.MustUint("id"), a.MustStr("writer")
		if err := a.Done(); err != nil {
			return err
		}
		fmt.Fprintf(out, "ledger %d unclosed=%t settled=%t\n", id, e.m.LedgerUnclosed(id), e.m.LedgerSettled(id, writer))
	default:
		return fmt.Errorf("ledger %q: want open, closed or settled", verb)
	}
	return nil
}

func (e *machineEnv) grant(a *scripttest.Args, _ *strings.Builder) error {
	id := e.stream(a)
	ledger, count := a.MustUint("ledger"), a.MustUint("count")
	batch := a.Uint("batch", e.nextBatch[id]+1)
	if err := a.Done(); err != nil {
		return err
	}
	e.nextBatch[id] = batch
	e.m.RequestGrant(e.now, id, batch, ledger, count)
	return nil
}

func (e *machineEnv) written(a *scripttest.Args, _ *strings.Builder) error {
	id := e.stream(a)
	ledger, entry, r := a.MustUint("ledger"), a.MustUint("entry"), scriptRange(a, "offsets")
	if err := a.Done(); err != nil {
		return err
	}
	e.m.Written(e.now, id, ledger, int64(entry), r)
	return nil
}

func (e *machineEnv) unused(a *scripttest.Args, _ *strings.Builder) error {
	id := e.stream(a)
	ledger, r := a.MustUint("ledger"), scriptRange(a, "offsets")
	if err := a.Done(); err != nil {
		return err
	}
	e.m.Unused(e.now, id, ledger, r)
	return nil
}

func (e *machineEnv) reserve(a *scripttest.Args, _ *strings.Builder) error {
	switch verb := a.Word(0); verb {
	case "ok":
		var def uint64
		if e.asked != nil {
			def = e.asked.New
		}
		to := a.Uint("to", def)
		if err := a.Done(); err != nil {
			return err
		}
		if to == 0 {
			return fmt.Errorf("reserve ok: no reservation was asked; give to=")
		}
		e.asked = nil
		e.m.ReservationExtended(to)
	case "failed":
		if err := a.Done(); err != nil {
			return err
		}
		e.asked = nil
		e.m.ReservationFailed()
	default:
		return fmt.Errorf("reserve %q: want ok or failed", verb)
	}
	return nil
}

func (e *machineEnv) deposed(a *scripttest.Args, _ *strings.Builder) error {
	if err := a.Done(); err != nil {
		return err
	}
	e.m.Deposed()
	return nil
}

func (e *machineEnv) confirm(a *scripttest.Args, _ *strings.Builder) error {
	seq := e.printedSeq
	if !a.Flag("all") {
		seq = a.MustUint("seq")
	}
	if err := a.Done(); err != nil {
		return err
	}
	e.m.Confirmed(seq)
	return nil
}

// tick moves the clock by +d or to an absolute time. With heartbeat=n1 (or
// n1,n2) the clock moves in 100 ms steps, each after a heartbeat from those
// streams, as an idle ingest node sends them.
func (e *machineEnv) tick(a *scripttest.Args, _ *strings.Builder) error {
	target := e.now
	if w := a.Word(0); strings.HasPrefix(w, "+") {
		target += a.ParseDuration("tick", w)
	} else {
		target = a.Duration("to", -1)
		if target < 0 {
			a.Fail("want +duration or to=duration")
		} else if target < e.now {
			a.Fail("to=%v is before now (%v)", target, e.now)
		}
	}
	var beats []SessionID
	if v := a.Str("heartbeat", ""); v != "" {
		for name := range strings.SplitSeq(v, ",") {
			one := scripttest.NewArgs("tick", []datadriven.CmdArg{{Key: "session", Vals: []string{name}}})
			beats = append(beats, e.stream(one))
			if one.Err() != nil {
				a.Fail("%v", one.Err())
			}
		}
	}
	if err := a.Done(); err != nil {
		return err
	}
	for len(beats) > 0 && e.now+100*time.Millisecond < target {
		e.now += 100 * time.Millisecond
		for _, id := range beats {
			e.m.Heard(e.now, id)
		}
		e.m.Tick(e.now)
	}
	e.now = target
	for _, id := range beats {
		e.m.Heard(e.now, id)
	}
	e.m.Tick(e.now)
	return nil
}
