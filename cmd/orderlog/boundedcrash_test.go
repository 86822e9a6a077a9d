package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"orderlog/client"
	"orderlog/internal/apierr"
	"orderlog/internal/history"
	"orderlog/proto/walpb"
)

// boundedDevFlags make rolls, deletions and checkpoints happen all the
// time under the test's load (a few thousand messages of ~10 bytes a
// second): a ledger rolls every 16 KiB or 300 ms, the log keeps 64 KiB,
// retention passes every 20 ms and deletes a ledger 200 ms after the log
// start passed it (the default, a minute counted from each restart, would
// delete nothing in a process killed every few seconds), and the commit
// log is checkpointed every 500 records or second.
var boundedDevFlags = []string{
	"--ledger-roll-bytes", "16KiB", "--ledger-roll-age", "300ms",
	"--retention-bytes", "64KiB", "--retention-check", "20ms", "--retention-grace", "200ms",
	"--checkpoint-records", "500", "--checkpoint-interval", "1s",
}

// boundedDev is `orderlog dev` with boundedDevFlags and a fixed etcd
// address, so the test can read its etcd while it runs.
type boundedDev struct {
	*serverProcess
	etcdAddr string
}

func (d *boundedDev) start() {
	d.t.Helper()
	args := append([]string{"dev", "--data", d.dataDir, "--grpc-addr", d.grpcAddr, "--http-addr", d.httpAddr,
		"--etcd-addr", d.etcdAddr, "--archive", "none"}, boundedDevFlags...)
	d.cmd = startChild(d.t, d.log, args...)
}

// boundedKills counts where the kills landed, by what each waited for.
type boundedKills struct {
	total, rolling, marked, checkpointing, startMoved int
	// marksRead kills with marks had the store read before the restarted
	// worker's first pass: markedHeld of them with a marked ledger still
	// on the store, markedGone with one gone from it (a kill between
	// steps 2 and 3).
	marksRead, markedHeld, markedGone int
	// probeBelowStart counts the probe's resends answered DUPLICATE with
	// an original offset below the log start (its ledger deleted).
	probeBelowStart int
	triggered       map[killTrigger]int // kills whose event came
	marks           []int               // marks present at each kill
}

// boundedRun is one test's server, clients and what it saw so far.
type boundedRun struct {
	t     *testing.T
	srv   *boundedDev
	c     *client.Client
	etcd  *clientv3.Client
	probe *probeProducer
	tail  *logTail
	rng   *rand.Rand
	kills boundedKills
	// start is the highest log start seen; checkpointC the highest C a
	// checkpoint covered at a kill.
	start, checkpointC uint64
}

// TestBoundedStateCrashHistory SIGKILLs a real `orderlog dev` process while
// its ledgers roll, retention deletes them and the sequencer checkpoints
// its commit log, restarts it, and checks (issue 16, "Bounded state over
// long runs"):
//   - a history tailed from offset 0 through every restart: every
//     acknowledged message logged exactly once at its acknowledged offset,
//     producer order, real-time order;
//   - the final read from the log start: every message acknowledged at or
//     above it present once at its offset, the same as the tail served;
//   - a read below the log start answers OFFSET_OUT_OF_RANGE, no data
//     (gRPC and HTTP);
//   - the log start never moves back (in etcd at each kill, and in Status
//     after each restart);
//   - the range served before a kill reads the same after the restart,
//     where it is still above the log start;
//   - an exactly-once producer's last message, resent after each restart,
//     is answered DUPLICATE with its original offset;
//   - at each kill, the ledgers a takeover reads (the checkpoint pointer's,
//     the commit ledgers from its FirstKept on) exist, and the C the
//     checkpoint covers never decreases;
//   - no deletion mark stays, and no unpinned ledger below the log start
//     is left, after retention's next passes; the store holds no ledger
//     whose record is gone;
//   - the run saw the log start move, a mark and a checkpoint (else it
//     tested nothing).
//
// The kills take turns: 0-3 ms after the test sees a deletion mark
// created in etcd (retention's step 1), 0-3 ms after it sees one removed
// with its ledger's record (step 3; the next ledger's steps 2 and 3 come
// then), as soon as it sees a roll open a writer's next ledger, 0-40 ms
// after it sees a checkpoint ledger created, and at a random moment. The
// killed process's etcd says where each kill landed: during a roll (a
// writer with two open ledgers), a deletion (a mark present), a checkpoint
// (etcdState.checkpointing); the log reports the counts.
// ORDERLOG_SOAK=n runs n times the 6 default kills.
func TestBoundedStateCrashHistory(t *testing.T) {
	cycles := 6
	if n, err := strconv.Atoi(os.Getenv("ORDERLOG_SOAK")); err == nil && n > 0 {
		cycles *= n
	}
	began := time.Now()
	srv := &boundedDev{serverProcess: newDevProcess(t), etcdAddr: freeAddr(t)}
	srv.start()
	c, err := client.Dial(srv.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv.waitReady(c)
	defer func() {
		if t.Failed() || os.Getenv(boundedDebugEnv) != "" {
			raw, _ := os.ReadFile(srv.log.Name())
			t.Logf("server log:\n%s", raw)
		}
	}()
	seed := uint64(time.Now().UnixNano())
	run := &boundedRun{t: t, srv: srv, c: c, etcd: dialEtcd(t, srv.etcdAddr), tail: &logTail{},
		rng: rand.New(rand.NewPCG(seed, 16)), kills: boundedKills{triggered: map[killTrigger]int{}}}
	defer run.etcd.Close()

	recorder := history.NewRecorder()
	errs := make(chan error, 1000)
	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		p := &crashProducer{name: fmt.Sprintf("p%d", i), recorder: recorder, errs: errs}
		go p.run(ctx, c, rand.New(rand.NewPCG(uint64(i), 16)), &wg)
	}
	tailCtx, stopTail := context.WithCancel(context.Background())
	defer stopTail()
	tailDone := make(chan struct{})
	go func() { defer close(tailDone); run.tail.run(tailCtx, c) }()
	if run.probe, err = newProbeProducer(ctx, srv.grpcAddr, "probe", recorder); err != nil {
		t.Fatal(err)
	}
	defer run.probe.conn.Close()

	triggers := []killTrigger{killAtMark, killAtRemoved, killAtRoll, killAtCheckpoint, killAtRandom}
	for cycle := 0; cycle < cycles && !t.Failed(); cycle++ {
		run.cycle(triggers[cycle%len(triggers)])
	}
	restarted := time.Now()
	waitAckedAfter(t, recorder, restarted)
	time.Sleep(300 * time.Millisecond)
	stopLoad()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	run.checkCoverage()
	checkBoundedHistory(t, c, recorder.Ops(), run.tail, stopTail, tailDone)
	checkDeletionsFinish(t, srv, c)
	k := run.kills
	t.Logf("seed %d, %d kills (events seen before them %v): %d during a roll, %d with a deletion mark (marks per kill %v; of %d whose store was read: %d with a marked ledger on the store, %d with one gone from it), %d during a checkpoint, %d with the log start moved since the previous kill; %d probe duplicates of a message below the log start; %v",
		seed, k.total, k.triggered, k.rolling, k.marked, k.marks, k.marksRead, k.markedHeld, k.markedGone, k.checkpointing, k.startMoved, k.probeBelowStart, time.Since(began).Round(time.Millisecond))
	srv.stop()
}

// cycle logs a probe message, waits for the retention worker, lets the
// load run, waits for the trigger, kills the server, reads where the kill
// landed from its etcd, restarts it, and checks the log start, a read
// below it, the probe's duplicate and the reads of the range tailed before
// the kill.
func (r *boundedRun) cycle(trigger killTrigger) {
	t := r.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The probe's message goes first: by the kill, retention has usually
	// deleted its ledger, and the duplicate comes from a snapshot.
	if err := r.probe.sendNext(ctx); err != nil {
		t.Fatalf("probe before the kill: %v", err)
	}
	waitRetentionElected(t, r.etcd)
	time.Sleep(time.Duration(200+r.rng.IntN(800)) * time.Millisecond)
	if trigger != killAtRandom && waitTrigger(ctx, r.etcd, trigger, 5*time.Second) {
		r.kills.triggered[trigger]++
		switch trigger {
		case killAtMark, killAtRemoved:
			time.Sleep(time.Duration(r.rng.IntN(4)) * time.Millisecond)
		case killAtCheckpoint: // a whole checkpoint takes 50-200 ms here
			time.Sleep(time.Duration(r.rng.IntN(40)) * time.Millisecond)
		} // a roll is over in a few milliseconds
	}
	r.srv.kill()
	tailed, _ := r.tail.snapshot()
	killed := readKilledEtcd(t, r.srv.dataDir)
	r.noteKill(killed)

	r.srv.start()
	r.srv.waitReady(r.c)
	r.noteDeletionSteps(ctx, killed)
	st, err := r.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.LogStart < r.start {
		t.Errorf("after a restart Status says the log start is %d, below %d", st.LogStart, r.start)
	}
	r.start = max(r.start, st.LogStart)
	if r.start > 0 {
		for _, offset := range []uint64{0, r.start - 1} {
			if err := readBelowStart(ctx, r.c, offset); err != nil {
				t.Error(err)
			}
			if err := httpReadBelowStart(ctx, r.srv.httpAddr, offset); err != nil {
				t.Error(err)
			}
		}
	}
	if err := r.probe.resendLast(ctx); err != nil {
		t.Error(err)
	} else if r.probe.lastOffset < r.start {
		r.kills.probeBelowStart++
	}
	compareAfterRestart(t, ctx, r.c, tailed, r.start)
}

// checkCoverage fails a run that did not exercise what it is about: the
// log start never moved, no deletion mark was ever seen, or no checkpoint
// was written.
func (r *boundedRun) checkCoverage() {
	switch {
	case r.start == 0:
		r.t.Error("the log start never moved: retention deleted nothing")
	case r.kills.triggered[killAtMark]+r.kills.triggered[killAtRemoved] == 0 && r.kills.marked == 0:
		r.t.Error("no deletion mark was ever seen: retention deleted nothing, or without marking first")
	case r.checkpointC == 0:
		r.t.Error("no commit-log checkpoint was written before a kill")
	}
}

// noteDeletionSteps counts, for a kill that left marks, whether the
// restarted store still held a marked ledger (killed before its step 2
// was durable) or not (killed between steps 2 and 3). The restarted
// retention worker waits for the killed one's election key to expire (5 s)
// before its first pass: a store read while that key is there is the
// store as the kill left it.
func (r *boundedRun) noteDeletionSteps(ctx context.Context, killed etcdState) {
	if len(killed.deleting) == 0 || retentionCandidates(ctx, r.etcd) < 2 {
		return
	}
	held, err := storeLedgers(ctx, r.srv.grpcAddr)
	if err != nil || retentionCandidates(ctx, r.etcd) < 2 {
		return
	}
	r.kills.marksRead++
	var onStore, gone bool
	for id := range killed.deleting {
		if slices.Contains(held, id) {
			onStore = true
		} else {
			gone = true
		}
	}
	if onStore {
		r.kills.markedHeld++
	}
	if gone {
		r.kills.markedGone++
	}
}

// noteKill counts where a kill landed and checks the log start in etcd.
func (r *boundedRun) noteKill(killed etcdState) {
	if os.Getenv(boundedDebugEnv) != "" {
		r.t.Logf("etcd at kill %d: %v", r.kills.total+1, killed)
	}
	r.kills.total++
	r.kills.marks = append(r.kills.marks, len(killed.deleting))
	if killed.rolling() {
		r.kills.rolling++
	}
	if len(killed.deleting) > 0 {
		r.kills.marked++
	}
	if killed.checkpointing() {
		r.kills.checkpointing++
	}
	if err := killed.commitLogReadable(); err != nil {
		r.t.Errorf("at kill %d: %v\n%v", r.kills.total, err, killed)
	}
	if killed.checkpoint.C < r.checkpointC {
		r.t.Errorf("at kill %d the checkpoint covers [0, %d), less than %d before", r.kills.total, killed.checkpoint.C, r.checkpointC)
	}
	r.checkpointC = max(r.checkpointC, killed.checkpoint.C)
	if killed.start > r.start {
		r.kills.startMoved++
	}
	if killed.start < r.start {
		r.t.Errorf("the log start in etcd moved back from %d to %d", r.start, killed.start)
	}
	r.start = max(r.start, killed.start)
}

// compareAfterRestart reads again what the tail had been served before the
// kill, from the log start on (at most its last 5,000 offsets).
func compareAfterRestart(t *testing.T, ctx context.Context, c *client.Client, tailed history.Read, start uint64) {
	t.Helper()
	end := tailed.Committed
	first := max(start, end-min(end, 5000))
	if first >= end {
		return
	}
	if err := c.WaitCommitted(ctx, end); err != nil {
		t.Errorf("after a restart: %v", err)
		return
	}
	again, from, err := readAbove(ctx, c, first)
	if err != nil {
		t.Errorf("read from %d after a restart: %v", first, err)
		return
	}
	if first = from; first >= end {
		return
	}
	if before, after := within(tailed, first, end), within(again, first, end); before != after {
		t.Errorf("[%d, %d) read differently after a restart:\nbefore: %s\nafter:  %s", first, end, before, after)
	}
}

// checkBoundedHistory waits for the tail to reach C, then checks the
// tailed history and the final read from the log start.
func checkBoundedHistory(t *testing.T, c *client.Client, ops []history.Op, tail *logTail, stopTail func(), tailDone <-chan struct{}) {
	t.Helper()
	var maxAcked uint64
	for _, op := range ops {
		if !op.Acked.IsZero() {
			maxAcked = max(maxAcked, op.Offset+1)
		}
	}
	waitCommittedAt(t, c, maxAcked)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); tail.next() < st.Committed; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the tail is at %d, C at %d", tail.next(), st.Committed)
		}
	}
	stopTail()
	<-tailDone
	for _, err := range tail.errors() {
		t.Error(err)
	}
	tailed, lost := tail.snapshot()
	report, violations := history.Check(vouchable(ops, lost), tailed)
	for _, v := range violations {
		t.Errorf("tailed history: %v", v)
	}
	t.Logf("tailed history: %v; lost to retention before the tail read them: %v", report, lost)
	if report.Acked == 0 {
		t.Fatal("no message was acknowledged")
	}
	checkFinalRead(t, ctx, c, ops, tailed)
}

// checkFinalRead reads from the log start twice: the same both times, the
// same as the tail served, and every acknowledged message at or above the
// start present once at its offset.
func checkFinalRead(t *testing.T, ctx context.Context, c *client.Client, ops []history.Op, tailed history.Read) {
	t.Helper()
	first, start, err := readAbove(ctx, c, 0)
	if err != nil {
		t.Fatalf("read from the log start: %v", err)
	}
	second, secondStart, err := readAbove(ctx, c, start)
	if err != nil {
		t.Fatalf("read from the log start: %v", err)
	}
	from, end := secondStart, min(first.Committed, second.Committed, tailed.Committed)
	if within(first, from, end) != within(second, from, end) {
		t.Errorf("two reads of [%d, %d) differ", from, end)
	}
	if within(first, start, end) != within(tailed, start, end) {
		t.Errorf("the read of [%d, %d) differs from what the tail was served", start, end)
	}
	if start > 0 {
		first.Holes = append(first.Holes, [2]uint64{0, start}) // deleted by retention
	}
	report, violations := history.Check(vouchable(ops, [][2]uint64{{0, start}}), first)
	for _, v := range violations {
		t.Errorf("read from the log start %d: %v", start, v)
	}
	t.Logf("read from the log start %d: %v", start, report)
}

// readAbove reads [from, C), or from the log start if that is higher; a
// read that the moving log start overtakes (OFFSET_OUT_OF_RANGE) is
// started again from the new start. It returns where the read began.
func readAbove(ctx context.Context, c *client.Client, from uint64) (history.Read, uint64, error) {
	for attempt := 0; ; attempt++ {
		st, err := c.Status(ctx)
		if err != nil {
			return history.Read{}, 0, err
		}
		start := max(from, st.LogStart)
		read, err := readFrom(ctx, c, start)
		if err == nil || apierr.As(err).Code != apierr.OffsetOutOfRange || attempt == 5 {
			return read, start, err
		}
	}
}

// vouchable drops the acknowledgements of offsets in the given ranges
// (deleted before they were read); the sends stay, for real-time order.
func vouchable(ops []history.Op, gone [][2]uint64) []history.Op {
	out := make([]history.Op, 0, len(ops))
	for _, op := range ops {
		for _, g := range gone {
			if !op.Acked.IsZero() && op.Offset >= g[0] && op.Offset < g[1] {
				op.Acked, op.Offset = time.Time{}, 0
			}
		}
		out = append(out, op)
	}
	return out
}

// checkDeletionsFinish waits for retention's passes, once its worker is
// elected, to leave no deletion mark and no unpinned closed ledger below
// the log start (20 s at most: a deletion takes ~60 ms here, and a kill
// can leave a hundred marks), and checks that the store holds no ledger
// whose record is gone.
func checkDeletionsFinish(t *testing.T, srv *boundedDev, c *client.Client) {
	t.Helper()
	cli := dialEtcd(t, srv.etcdAddr)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitRetentionElected(t, cli)
	var st etcdState
	var undeleted, pinned []uint64
	began, marksAtStop := time.Now(), -1
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var err error
		if st, err = readEtcdState(ctx, cli); err != nil {
			t.Fatal(err)
		}
		if marksAtStop < 0 {
			marksAtStop = len(st.deleting)
		}
		undeleted, pinned = st.undeleted()
		stranded := st.strandedCheckpoints()
		if len(undeleted) == 0 && len(st.deleting) == 0 && len(stranded) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("20 s after the retention worker was elected: marks %v, ledgers below the log start not deleted %v, "+
				"checkpoint ledgers below the checkpoint's first ledger %d not deleted %v\n%v",
				st.deleting, undeleted, st.checkpoint.FirstLedger, stranded, st)
			break
		}
	}
	t.Logf("at the end: %d marks were left, all gone %v later; %d ledger records, %d below the log start %d pinned by a producer",
		marksAtStop, time.Since(began).Round(time.Millisecond), len(st.ledgers), len(pinned), st.start)
	// Records read before the store's list: a ledger deleted in between is
	// among them, one created in between has a higher id.
	if st, err := readEtcdState(ctx, cli); err != nil {
		t.Fatal(err)
	} else {
		checkStoreLedgers(t, ctx, srv.grpcAddr, st.ledgerIDs())
	}
}

// checkStoreLedgers checks that the store holds no ledger whose record is
// gone (records in id order, read before).
func checkStoreLedgers(t *testing.T, ctx context.Context, addr string, records []uint64) {
	t.Helper()
	held, err := storeLedgers(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	newest := uint64(0)
	if len(records) > 0 {
		newest = records[len(records)-1]
	}
	for _, id := range held {
		if _, found := slices.BinarySearch(records, id); !found && id <= newest {
			t.Errorf("the store holds ledger %d, which has no record (its deletion left it, or it was never created)", id)
		}
	}
	t.Logf("the store holds %d ledgers, etcd %d records", len(held), len(records))
}

// storeLedgers are the ledgers the dev process's WAL store holds.
func storeLedgers(ctx context.Context, addr string) ([]uint64, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	info, err := walpb.NewWALClient(conn).Info(ctx, &walpb.InfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("store info: %w", err)
	}
	return info.Ledgers, nil
}

// boundedDebugEnv=1 logs the etcd state at each kill and the server's log
// also when the test passes.
const boundedDebugEnv = "ORDERLOG_BOUNDED_DEBUG"
