package coordinator

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"orderlog/ingest/pipeline"
	"orderlog/ingest/producer"
	"orderlog/internal/apierr"
	"orderlog/internal/scripttest"
	"orderlog/proto/orderlogpb"
)

// TestInteraction runs the transcripts under testdata/machine (see
// docs/testing.md): each block feeds the machine inputs, one per line, and
// prints what its Ready asks for. `go test ./ingest/coordinator -run
// TestInteraction -rewrite` regenerates the expected output.
//
// Commands (inputs):
//
//	new [window=N] [batch-messages=N]
//	produce producer=ID epoch=E seq=S [count=N] [frame=NAME]   a producer's frame
//	produce key=KEY [frame=NAME]                                an Idempotency-Key frame
//	produce count=N [frame=NAME]                                at least once
//	  (each produce takes [ack=leader|replicated], the frame's ack mode, and
//	  [value=V], every message's value; else "FRAME.INDEX")
//	init producer=ID epoch=E token=T                            InitProducer after its etcd write
//	takeover-done producer=ID epoch=E [current=E] [gen=G] [next=S window=[a,b)] [err=CODE]
//	recorded producer=ID [err=CODE]                             a RecordStates write finished
//	bucket-registered index=I producer=ID epoch=E
//	ledger-opened ledger=ID [lac=N] | ledger-open-failed
//	granted batch=B first=O | refused batch=B ledger=ID
//	confirmed ledger=ID lac=N | locally-durable ledger=ID entry=N
//	ledger-failed ledger=ID | ledger-closed ledger=ID last=N
//	roll [reason=TEXT]                                          the owner asks for a roll
//	tick at=SECONDS                                             the machine's time
//	expired producer=ID [err=CODE]                              an ExpireProducers write finished
//
// and `ready` (print and forget the Ready) and `status`.
func TestInteraction(t *testing.T) {
	datadriven.Walk(t, "testdata/machine", func(t *testing.T, path string) {
		env := &interactionEnv{frames: make(map[string]*Frame)}
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			out, err := scripttest.RunBlock(td, env.run)
			if err != nil {
				t.Fatalf("%s: %v", td.Pos, err)
			}
			return out
		})
	})
}

// interactionEnv is the machine under test and the names the script gave.
type interactionEnv struct {
	m      *Machine
	frames map[string]*Frame
	named  int // frames named automatically so far
}

// session is the producer's current session: a script's takeover-done and
// recorded answer it.
func (e *interactionEnv) session(id uint64) uint64 {
	if s, ok := e.m.producers[id]; ok {
		return s.gen
	}
	return 0
}

func (e *interactionEnv) run(a *scripttest.Args, out *strings.Builder) error {
	if a.Cmd == "new" {
		return e.newMachine(a)
	}
	if e.m == nil {
		return fmt.Errorf("%s: no machine yet (start with new)", a.Cmd)
	}
	input, ok := e.inputs()[a.Cmd]
	if !ok {
		return fmt.Errorf("unknown command %q", a.Cmd)
	}
	return input(a, out)
}

func (e *interactionEnv) inputs() map[string]func(*scripttest.Args, *strings.Builder) error {
	return map[string]func(*scripttest.Args, *strings.Builder) error{
		"produce": e.produce, "init": e.initProducer, "takeover-done": e.takeoverDone, "recorded": e.recorded,
		"bucket-registered": e.bucketRegistered, "ledger-opened": e.ledgerOpened, "ledger-open-failed": e.ledgerOpenFailed,
		"granted": e.granted, "refused": e.refused, "confirmed": e.confirmed, "locally-durable": e.locallyDurable,
		"ledger-failed": e.ledgerFailed, "ledger-closed": e.ledgerClosed, "ready": e.ready, "status": e.status,
		"roll": e.roll, "tick": e.tick, "expired": e.expired,
	}
}

func (e *interactionEnv) newMachine(a *scripttest.Args) error {
	cfg := Config{DedupWindow: int(a.Uint("window", 8)), Pipeline: pipeline.Config{MaxBatchMessages: int(a.Uint("batch-messages", 100))},
		ProducerExpiry: time.Duration(a.Uint("expiry", 0)) * time.Second}
	if err := a.Done(); err != nil {
		return err
	}
	m, err := New(cfg)
	e.m, e.frames, e.named = m, make(map[string]*Frame), 0
	return err
}

func (e *interactionEnv) produce(a *scripttest.Args, _ *strings.Builder) error {
	req := &orderlogpb.ProduceRequest{ProducerId: a.Uint("producer", 0), Epoch: a.Uint("epoch", 0),
		FirstSeq: a.Uint("seq", 0), IdempotencyKey: a.Str("key", "")}
	switch ack := a.Str("ack", ""); ack {
	case "leader":
		req.Ack = orderlogpb.AckMode_ACK_MODE_LEADER
	case "replicated":
		req.Ack = orderlogpb.AckMode_ACK_MODE_REPLICATED
	case "":
	default:
		return fmt.Errorf("ack=%s: want leader or replicated", ack)
	}
	count := int(a.Uint("count", 1))
	e.named++
	name := a.Str("frame", fmt.Sprintf("f%d", e.named))
	value := a.Str("value", "")
	if err := a.Done(); err != nil {
		return err
	}
	for i := range count {
		m := &orderlogpb.Message{Value: fmt.Appendf(nil, "%s.%d", name, i)}
		if value != "" {
			m.Value = []byte(value)
		}
		req.Messages = append(req.Messages, m)
	}
	f := NewFrame(req, name)
	e.frames[name] = f
	e.m.Produce(f)
	return nil
}

func (e *interactionEnv) initProducer(a *scripttest.Args, _ *strings.Builder) error {
	id, epoch, token := a.MustUint("producer"), a.MustUint("epoch"), a.MustUint("token")
	if err := a.Done(); err != nil {
		return err
	}
	e.m.InitProducer(id, epoch, token)
	return nil
}

func (e *interactionEnv) takeoverDone(a *scripttest.Args, _ *strings.Builder) error {
	r := TakeoverResult{Producer: a.MustUint("producer"), Epoch: a.MustUint("epoch")}
	r.Session = e.session(r.Producer)
	r.Current = a.Uint("current", r.Epoch)
	r.OwnerGen = a.Uint("gen", 1)
	r.State = producer.State{ID: r.Producer, Epoch: r.Current, DurableNext: a.Uint("next", 0)}
	if a.Has("window") {
		first, end := a.Offsets("window")
		for offset := first; offset < end; offset++ {
			r.State.Window = append(r.State.Window, offset)
		}
	}
	r.Err = scriptError(a)
	if err := a.Done(); err != nil {
		return err
	}
	e.m.TakeoverDone(r)
	return nil
}

// scriptError is the API error named by err=CODE, nil without one.
func scriptError(a *scripttest.Args) error {
	if code := a.Str("err", ""); code != "" {
		return apierr.New(apierr.Code(code), "as the script says")
	}
	return nil
}

func (e *interactionEnv) recorded(a *scripttest.Args, _ *strings.Builder) error {
	id, err := a.MustUint("producer"), scriptError(a)
	if doneErr := a.Done(); doneErr != nil {
		return doneErr
	}
	e.m.StateRecorded(id, e.session(id), err)
	return nil
}

func (e *interactionEnv) bucketRegistered(a *scripttest.Args, _ *strings.Builder) error {
	index, id, epoch := a.MustUint("index"), a.MustUint("producer"), a.MustUint("epoch")
	if err := a.Done(); err != nil {
		return err
	}
	e.m.BucketRegistered(int(index), id, epoch)
	return nil
}

func (e *interactionEnv) ledgerOpened(a *scripttest.Args, _ *strings.Builder) error {
	id, lac := a.MustUint("ledger"), a.Int("lac", -1)
	if err := a.Done(); err != nil {
		return err
	}
	e.m.LedgerOpened(id, lac)
	return nil
}

func (e *interactionEnv) ledgerOpenFailed(a *scripttest.Args, _ *strings.Builder) error {
	if err := a.Done(); err != nil {
		return err
	}
	e.m.LedgerOpenFailed()
	return nil
}

func (e *interactionEnv) granted(a *scripttest.Args, _ *strings.Builder) error {
	batchID, first := a.MustUint("batch"), a.MustUint("first")
	if err := a.Done(); err != nil {
		return err
	}
	e.m.Granted(batchID, first)
	return nil
}

func (e *interactionEnv) refused(a *scripttest.Args, _ *strings.Builder) error {
	batchID, ledger := a.MustUint("batch"), a.MustUint("ledger")
	if err := a.Done(); err != nil {
		return err
	}
	e.m.GrantRefused(batchID, ledger)
	return nil
}

func (e *interactionEnv) confirmed(a *scripttest.Args, _ *strings.Builder) error {
	ledger, lac := a.MustUint("ledger"), a.Int("lac", 0)
	if err := a.Done(); err != nil {
		return err
	}
	e.m.Confirmed(ledger, lac)
	return nil
}

func (e *interactionEnv) locallyDurable(a *scripttest.Args, _ *strings.Builder) error {
	ledger, entry := a.MustUint("ledger"), a.Int("entry", 0)
	if err := a.Done(); err != nil {
		return err
	}
	e.m.LocallyDurable(ledger, entry)
	return nil
}

func (e *interactionEnv) ledgerFailed(a *scripttest.Args, _ *strings.Builder) error {
	ledger := a.MustUint("ledger")
	if err := a.Done(); err != nil {
		return err
	}
	e.m.LedgerFailed(ledger)
	return nil
}

func (e *interactionEnv) ledgerClosed(a *scripttest.Args, _ *strings.Builder) error {
	ledger, last := a.MustUint("ledger"), a.Int("last", -1)
	if err := a.Done(); err != nil {
		return err
	}
	e.m.LedgerClosed(ledger, last)
	return nil
}

func (e *interactionEnv) roll(a *scripttest.Args, out *strings.Builder) error {
	reason := a.Str("reason", "size")
	if err := a.Done(); err != nil {
		return err
	}
	if !e.m.Roll(reason) {
		out.WriteString("no roll\n")
	}
	return nil
}

// scriptEpoch is the tick command's time zero.
var scriptEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (e *interactionEnv) tick(a *scripttest.Args, _ *strings.Builder) error {
	at := a.MustUint("at")
	if err := a.Done(); err != nil {
		return err
	}
	e.m.Tick(scriptEpoch.Add(time.Duration(at) * time.Second))
	return nil
}

func (e *interactionEnv) expired(a *scripttest.Args, _ *strings.Builder) error {
	id, err := a.MustUint("producer"), scriptError(a)
	if doneErr := a.Done(); doneErr != nil {
		return doneErr
	}
	e.m.ProducerExpired(id, e.session(id), err)
	return nil
}

func (e *interactionEnv) status(a *scripttest.Args, out *strings.Builder) error {
	if err := a.Done(); err != nil {
		return err
	}
	fmt.Fprintf(out, "ledger=%s waiting=%d in-flight-batches=%d refused-in-a-row=%d\n",
		ledgerName(e.m.ledger.id), e.m.pipe.Waiting(), e.m.pipe.InFlight(), e.m.refusedInARow)
	for _, id := range sortedIDs(e.m.producers, func(*session) bool { return true }) {
		s := e.m.producers[id]
		state, _ := e.m.table.Get(id)
		fmt.Fprintf(out, "producer %d: %s epoch=%d next=%d in-flight=%d window=%s held=%d\n", id, s.phase(), state.Epoch,
			state.DurableNext, e.m.table.InFlight(id), windowText(state.Window), len(s.held))
	}
	return nil
}

// phase names where a session is in its settling.
func (s *session) phase() string {
	switch {
	case s.ready:
		return "ready"
	case s.recording:
		return fmt.Sprintf("recording-state-ledger=L%d", s.snapshotLedger)
	case s.settled && s.snapshotEntry == snapshotInNextLedger:
		return "snapshot-in-next-ledger"
	case s.settled:
		return fmt.Sprintf("snapshot=L%d/%d", s.snapshotLedger, s.snapshotEntry)
	}
	return "taking-over"
}

func ledgerName(id uint64) string {
	if id == 0 {
		return "none"
	}
	return fmt.Sprintf("L%d", id)
}

// windowText prints a window of offsets, contiguous runs as [a,b).
func windowText(window []uint64) string {
	if len(window) == 0 {
		return "[]"
	}
	var parts []string
	for start := 0; start < len(window); {
		end := start + 1
		for end < len(window) && window[end] == window[end-1]+1 {
			end++
		}
		parts = append(parts, fmt.Sprintf("[%d,%d)", window[start], window[end-1]+1))
		start = end
	}
	return strings.Join(parts, "+")
}

func (e *interactionEnv) ready(a *scripttest.Args, out *strings.Builder) error {
	if err := a.Done(); err != nil {
		return err
	}
	rd := e.m.Ready()
	printReady(out, &rd)
	if rd.Empty() {
		out.WriteString("nothing\n")
	}
	return nil
}

func printReady(out *strings.Builder, rd *Ready) {
	for _, g := range rd.GrantRequests {
		fmt.Fprintf(out, "grant-request batch=%d ledger=L%d count=%d\n", g.BatchID, g.Ledger, g.Count)
	}
	for _, ap := range rd.Appends {
		printAppend(out, ap)
	}
	for _, id := range rd.LedgersClosed {
		fmt.Fprintf(out, "report closed L%d\n", id)
	}
	for _, w := range rd.Written {
		fmt.Fprintf(out, "report written L%d entry=%d offsets=[%d,%d)\n", w.Ledger, w.Entry, w.Span.First, w.Span.End)
	}
	for _, u := range rd.Unused {
		fmt.Fprintf(out, "report unused L%d offsets=[%d,%d)\n", u.Ledger, u.Span.First, u.Span.End)
	}
	for _, f := range rd.Answers {
		fmt.Fprintf(out, "answer %s: %s\n", f.Owner, responseText(f.Response()))
	}
	for _, f := range rd.Releases {
		fmt.Fprintf(out, "release %s\n", f.Owner)
	}
	if o := rd.OpenLedger; o != nil {
		fmt.Fprintf(out, "open-ledger pause=%v snapshot=%s (%s)\n", o.Pause, statesText(o.Snapshot), o.Reason)
	}
	for _, id := range rd.CloseLedgers {
		fmt.Fprintf(out, "close L%d\n", id)
	}
	for _, t := range rd.Takeovers {
		fmt.Fprintf(out, "take-over producer=%d epoch=%d\n", t.Producer, t.Epoch)
	}
	for _, r := range rd.RecordStates {
		fmt.Fprintf(out, "record-state producer=%d ledger=L%d\n", r.Producer, r.Ledger)
	}
	for _, index := range rd.RegisterBuckets {
		fmt.Fprintf(out, "register-bucket index=%d name=%s\n", index, BucketName(index))
	}
	for _, adv := range rd.AdvanceStates {
		var ids []string
		for _, p := range adv.Producers {
			ids = append(ids, fmt.Sprintf("p%d@gen%d", p.Producer, p.OwnerGen))
		}
		fmt.Fprintf(out, "advance-state ledger=L%d producers=[%s]\n", adv.Ledger, strings.Join(ids, " "))
	}
	for _, p := range rd.ExpireProducers {
		fmt.Fprintf(out, "expire producer=%d gen=%d\n", p.Producer, p.OwnerGen)
	}
	for _, d := range rd.InitsDone {
		if d.Err != nil {
			fmt.Fprintf(out, "init-done token=%d error=%s\n", d.Token, apierr.As(d.Err).Code)
			continue
		}
		fmt.Fprintf(out, "init-done token=%d producer=%d epoch=%d next-seq=%d\n", d.Token, d.Response.ProducerId, d.Response.Epoch, d.Response.NextSeq)
	}
}

func printAppend(out *strings.Builder, ap Append) {
	if ap.Batch == nil {
		fmt.Fprintf(out, "append L%d entry=%d snapshot=%s\n", ap.Ledger, ap.Entry, statesText(ap.Snapshot))
		return
	}
	b := ap.Batch
	var runs []string
	for start := 0; start < len(b.Messages); {
		m := b.Messages[start]
		end := start + 1
		for end < len(b.Messages) && b.Messages[end].ProducerID == m.ProducerID && (m.ProducerID == 0 || b.Messages[end].Seq == m.Seq+uint64(end-start)) {
			end++
		}
		if m.ProducerID == 0 {
			runs = append(runs, fmt.Sprintf("anon×%d", end-start))
		} else {
			runs = append(runs, fmt.Sprintf("p%d:seq[%d,%d)", m.ProducerID, m.Seq, m.Seq+uint64(end-start)))
		}
		start = end
	}
	fmt.Fprintf(out, "append L%d entry=%d batch=%d offsets=[%d,%d) %s\n", ap.Ledger, ap.Entry, b.ID, b.First,
		b.First+uint64(len(b.Messages)), strings.Join(runs, " "))
}

func statesText(states []producer.State) string {
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = fmt.Sprintf("p%d(epoch=%d next=%d window=%s)", s.ID, s.Epoch, s.DurableNext, windowText(s.Window))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func responseText(resp *orderlogpb.ProduceResponse) string {
	if resp.ErrorCode != "" {
		if resp.ErrorCode == string(apierr.OutOfOrderSequence) {
			return fmt.Sprintf("error=%s expected-seq=%d", resp.ErrorCode, resp.ExpectedSeq)
		}
		return "error=" + resp.ErrorCode
	}
	acks := make([]string, len(resp.Acks))
	for i, a := range resp.Acks {
		switch {
		case a.DuplicateWithoutOffset:
			acks[i] = "duplicate(no offset)"
		case a.Duplicate:
			acks[i] = fmt.Sprintf("%d(duplicate)", a.Offset)
		default:
			acks[i] = fmt.Sprint(a.Offset)
		}
	}
	return "offsets " + strings.Join(acks, " ")
}
