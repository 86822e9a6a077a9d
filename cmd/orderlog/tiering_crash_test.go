package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"orderlog/client"
	"orderlog/internal/history"
	"orderlog/internal/keys"
	"orderlog/proto/orderlogpb"
	"orderlog/tiering"
)

// tieringCrashEnv names the step of a publish after which a process's
// tiering worker SIGKILLs itself (tiering/crashpoint.go).
const tieringCrashEnv = "ORDERLOG_TIERING_CRASH_AT"

// tieringCrashSteps are the steps a worker is killed after, in the order
// the test takes them, and what the archive holds at the kill besides
// the plan in etcd: the planned object, its manifest segment. T is still
// the plan's first offset in each.
var tieringCrashSteps = []struct {
	step             string
	object, manifest bool
}{
	{step: "after-plan"},
	{step: "after-upload", object: true},
	{step: "after-manifest", object: true, manifest: true}, // before the T transaction
}

// tieringCrashArchiveFlags cut small files often: at 32 KiB, or 300 ms
// after a file's first message.
var tieringCrashArchiveFlags = []string{"--archive-file-bytes", "32KiB", "--archive-file-age", "300ms"}

// TestTieringWorkerCrashesAtEachStep: a three-node cluster where n1 and
// n2 archive to one directory (n3 does not, and serves the producers).
// For each step of a publish, n1's tiering worker leads and SIGKILLs
// itself right after that step while producers write to three topics;
// the test records the plan, the head and every archive object's bytes
// at the kill, and n2's worker takes over: it publishes the recorded plan
// under its keys and archives on up to C. Between steps, with T = C and
// nothing produced, n2 is killed and restarted so that the restarted n1
// leads again. Checked: the state at each kill is the step's; no object
// is ever replaced (same bytes, same file); T never decreases (every
// version of the head, watched); verify passes against the log; and the
// archive's rows of [0, T), read from the files, hold every acknowledged
// message once, in producer order, and equal the log's read.
func TestTieringWorkerCrashesAtEachStep(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three node processes and kills one three times")
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tc := newTieringCrashCluster(t)
	first, successor, plain := tc.nodes[0], tc.nodes[1], tc.nodes[2]
	tc.startArchiving(first, tieringCrashSteps[0].step)
	plain.start()
	tc.dialEtcd()
	tc.waitTieringLeader(ctx, first)
	tc.startArchiving(successor, "")
	for _, n := range tc.nodes {
		n.waitReady(ctx)
	}
	tc.dialClient()
	stopWatch := tc.watchHead()
	t.Logf("cluster ready after %s", time.Since(began).Round(time.Millisecond))

	recorder, errs := history.NewRecorder(), make(chan error, 1000)
	var crashes []tieringCrash
	for i, s := range tieringCrashSteps {
		phase := time.Now()
		load := startTieringLoad(tc.c, recorder, errs, i)
		tc.waitKilled(first, s.step)
		crash := tc.recordCrash(ctx, s.step)
		crash.check(t, s.object, s.manifest)
		next := ""
		if i+1 < len(tieringCrashSteps) {
			next = tieringCrashSteps[i+1].step
		}
		tc.startArchiving(first, next) // revokes its dead key: n2's worker leads at once
		head := tc.waitTakeover(ctx, crash, successor)
		first.waitReady(ctx)
		tc.checkNotOverwritten(append(crashes, crash))
		load.stop()
		caughtUp := tc.waitArchivedToC(ctx)
		crashes = append(crashes, crash)
		t.Logf("%s: plan [%d, %d) by epoch %d, %d objects at the kill; n2 published it (T=%d), then T reached C=%d; %s",
			s.step, crash.plan.First, crash.plan.End, crash.plan.Epoch, len(crash.objects), head.T, caughtUp.T,
			time.Since(phase).Round(time.Millisecond))
		if next != "" {
			// n2, restarted, revokes its killed worker's key: n1's
			// is then the oldest, and leads.
			handover := time.Now()
			successor.kill()
			tc.startArchiving(successor, "")
			tc.waitTieringLeader(ctx, first)
			successor.waitReady(ctx)
			t.Logf("n1 leads, n2 restarted and ready after %s", time.Since(handover).Round(time.Millisecond))
		}
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	head := tc.waitArchivedToC(ctx)
	tc.checkNotOverwritten(crashes)
	versions := stopWatch()
	t.Logf("watched %d versions of the head", versions)
	checked := time.Now()
	tc.checkArchive(head, recorder.Ops())
	t.Logf("archive checked in %s", time.Since(checked).Round(time.Millisecond))
	for _, n := range tc.nodes {
		n.kill() // nothing is checked after: a clean stop of the last members, short of a quorum, is slow
	}
	t.Logf("%d files, T=%d; %s", head.Files, head.T, time.Since(began).Round(time.Millisecond))
}

// tieringCrashCluster is a three-node cluster of which n1 and n2 archive.
type tieringCrashCluster struct {
	t          *testing.T
	nodes      []*nodeProcess
	archiveDir string
	etcd       *clientv3.Client
	c          *client.Client // through n3, which is never stopped
}

func newTieringCrashCluster(t *testing.T) *tieringCrashCluster {
	tc := &tieringCrashCluster{t: t, nodes: newTestCluster(t, 3), archiveDir: t.TempDir()}
	t.Cleanup(func() {
		if !t.Failed() && os.Getenv("ORDERLOG_TEST_LOGS") == "" {
			return
		}
		for _, n := range tc.nodes {
			raw, _ := os.ReadFile(n.log.Name())
			t.Logf("%s log:\n%s", n.name, raw)
		}
	})
	return tc
}

// startArchiving starts n as nodeProcess.start does, archiving to the
// cluster's directory; its tiering worker kills itself after crashAt
// ("" never).
func (tc *tieringCrashCluster) startArchiving(n *nodeProcess, crashAt string) {
	tc.t.Helper()
	n.env = nil
	if crashAt != "" {
		n.env = []string{tieringCrashEnv + "=" + crashAt}
	}
	n.extraArgs = append([]string{"--archive", "file://" + tc.archiveDir}, tieringCrashArchiveFlags...)
	n.start()
}

func (tc *tieringCrashCluster) dialEtcd() {
	var endpoints []string
	for _, n := range tc.nodes {
		endpoints = append(endpoints, n.etcdClient)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(func() { cli.Close() })
	tc.etcd = cli
}

func (tc *tieringCrashCluster) dialClient() {
	c, err := client.Dial(tc.nodes[2].grpcAddr)
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(func() { c.Close() })
	tc.c = c
}

// waitFor polls cond until it holds; what says what is awaited, and
// cond's text what it saw last.
func (tc *tieringCrashCluster) waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, string)) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, seen := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			tc.t.Fatalf("%s: not within %s (%v); last seen: %s", what, timeout, ctx.Err(), seen)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitTieringLeader waits until n's worker leads the tiering election
// (the key created first; its value is the node's name, a slash and its
// store id).
func (tc *tieringCrashCluster) waitTieringLeader(ctx context.Context, n *nodeProcess) {
	tc.t.Helper()
	tc.waitFor(ctx, 30*time.Second, n.name+" leading tiering", func() (bool, string) {
		getCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		resp, err := tc.etcd.Get(getCtx, keys.TieringElection+"/", clientv3.WithFirstCreate()...)
		if err != nil || len(resp.Kvs) == 0 {
			return false, fmt.Sprint("no leader: ", err)
		}
		leader := string(resp.Kvs[0].Value)
		return strings.HasPrefix(leader, n.name+"/"), leader
	})
}

// watchHead watches every version of the head, from the first, failing
// the test if T ever decreases. A watch cut off (a member stopped, a
// quorum lost) resumes after the last revision it saw. stop ends it and
// returns how many versions it saw.
func (tc *tieringCrashCluster) watchHead() (stop func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		var last uint64
		versions, from := 0, int64(1)
		for ctx.Err() == nil {
			for resp := range tc.etcd.Watch(clientv3.WithRequireLeader(ctx), keys.TieringHead, clientv3.WithRev(from)) {
				if resp.CompactRevision > from {
					from = resp.CompactRevision // versions before it are gone; go on from there
				}
				for _, ev := range resp.Events {
					from = ev.Kv.ModRevision + 1
					head, err := tiering.DecodeHead(ev.Kv.Value)
					switch {
					case ev.Type != clientv3.EventTypePut:
						tc.t.Errorf("the head was deleted at revision %d", ev.Kv.ModRevision)
					case err != nil:
						tc.t.Errorf("head at revision %d: %v", ev.Kv.ModRevision, err)
					case head.T < last:
						tc.t.Errorf("T decreased from %d to %d at revision %d", last, head.T, ev.Kv.ModRevision)
					default:
						last = head.T
						versions++
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
		done <- versions
	}()
	var versions int
	stopped := false
	stop = func() int {
		if !stopped {
			stopped = true
			cancel()
			versions = <-done
		}
		return versions
	}
	tc.t.Cleanup(func() { stop() })
	return stop
}

// tieringLoad is producers writing while a step plays out.
type tieringLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// tieringTopics are the topics the producers write to in turn.
var tieringTopics = []string{"orders", "clicks", "audit"}

// startTieringLoad starts three idempotent producers (new names each
// phase) that send frames of one to eight messages, one frame in flight
// each and at most one each 10 ms, and record every send and ack. A value is "name:seq", as
// fullRead parses it; a header pads the message.
func startTieringLoad(c *client.Client, recorder *history.Recorder, errs chan<- error, phase int) *tieringLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &tieringLoad{cancel: cancel}
	for i := range 3 {
		name := fmt.Sprintf("s%d-p%d", phase, i)
		l.wg.Go(func() { produceRecorded(ctx, c, name, recorder, errs) })
	}
	return l
}

// stop ends the sends and waits for the acks of the frames sent.
func (l *tieringLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

func produceRecorded(ctx context.Context, c *client.Client, name string, recorder *history.Recorder, errs chan<- error) {
	var p *client.Producer
	for p == nil {
		initCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		p, _ = c.NewProducer(initCtx, name, client.ProducerOptions{})
		cancel()
		if ctx.Err() != nil {
			return
		}
	}
	defer p.Close()
	pace := time.NewTicker(10 * time.Millisecond) // a few thousand messages a step, not as many as the nodes take
	defer pace.Stop()
	for n := 0; ctx.Err() == nil; n++ {
		<-pace.C
		first, sent := p.NextSeq(), time.Now()
		frame := make([]*orderlogpb.Message, 1+n%8)
		for i := range frame {
			seq := first + uint64(i)
			frame[i] = &orderlogpb.Message{Topic: tieringTopics[seq%3], Key: fmt.Appendf(nil, "k%d", seq%7),
				Value:   fmt.Appendf(nil, "%s:%d", name, seq),
				Headers: []*orderlogpb.Header{{Key: "pad", Value: bytes.Repeat([]byte{'x'}, 32+int(seq%96))}}}
		}
		pending, err := p.Send(ctx, frame...)
		if err != nil {
			if ctx.Err() == nil {
				errs <- fmt.Errorf("%s: send: %w", name, err)
			}
			return
		}
		for i := range frame { // recorded once queued: every frame queued must be acknowledged
			recorder.Sent(name, first+uint64(i), sent)
		}
		waitCtx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		acks, err := pending.Wait(waitCtx)
		cancel()
		if err != nil {
			errs <- fmt.Errorf("%s: frame at seq %d: %w", name, pending.FirstSeq(), err)
			return
		}
		now := time.Now()
		for i, ack := range acks {
			if err := recorder.Acked(name, pending.FirstSeq()+uint64(i), ack.Offset, now); err != nil {
				errs <- err
				return
			}
		}
	}
}

// waitKilled waits for n to end by the SIGKILL its worker sends itself
// after step: the test sends n no signal.
func (tc *tieringCrashCluster) waitKilled(n *nodeProcess, step string) {
	tc.t.Helper()
	exited := make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		tc.t.Fatalf("%s: %s's worker did not kill itself in 30 s; log in %s", step, n.name, n.log.Name())
	}
	status, ok := n.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !status.Signaled() || status.Signal() != syscall.SIGKILL {
		tc.t.Fatalf("%s: %s ended with %v, not by SIGKILL; log in %s", step, n.name, n.cmd.ProcessState, n.log.Name())
	}
}

// tieringCrash is what the archive held when a worker was killed.
type tieringCrash struct {
	step    string
	head    tiering.Head
	plan    tiering.Plan
	objects map[string]archiveObject // by key: every object, segments too
}

// archiveObject is an object of the file:// store: its bytes and file.
type archiveObject struct {
	data []byte
	info fs.FileInfo
}

// recordCrash reads the head, the plan and every object. The successor
// cannot lead before the killed worker's session lease expires or the
// restarted process revokes it, which the test does only after this.
func (tc *tieringCrashCluster) recordCrash(ctx context.Context, step string) tieringCrash {
	tc.t.Helper()
	crash := tieringCrash{step: step}
	tc.waitFor(ctx, 20*time.Second, step+": reading the head and the plan", func() (bool, string) {
		readCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var err error
		if crash.head, err = tiering.ReadHead(readCtx, tc.etcd); err != nil {
			return false, err.Error()
		}
		resp, err := tc.etcd.Get(readCtx, keys.TieringPlan)
		switch {
		case err != nil:
			return false, err.Error()
		case len(resp.Kvs) == 0:
			tc.t.Fatalf("%s: no plan in etcd after the kill; head %+v", step, crash.head)
		}
		if err := json.Unmarshal(resp.Kvs[0].Value, &crash.plan); err != nil {
			tc.t.Fatalf("%s: plan %s: %v", step, resp.Kvs[0].Value, err)
		}
		return true, ""
	})
	crash.objects = readArchiveObjects(tc.t, tc.archiveDir)
	return crash
}

// check: T is the plan's start, and the planned object and segment are
// there or not as the step says.
func (c tieringCrash) check(t *testing.T, object, manifest bool) {
	t.Helper()
	_, hasObject := c.objects[c.plan.Object]
	_, hasManifest := c.objects[c.plan.Manifest]
	if c.head.T != c.plan.First || c.plan.End <= c.plan.First || hasObject != object || hasManifest != manifest {
		t.Fatalf("%s: head %+v, plan %+v; object there: %v (want %v), segment there: %v (want %v)",
			c.step, c.head, c.plan, hasObject, object, hasManifest, manifest)
	}
}

// readArchiveObjects reads every object under dir (the store's staging
// directory .tmp excepted).
func readArchiveObjects(t *testing.T, dir string) map[string]archiveObject {
	t.Helper()
	objects := map[string]archiveObject{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == ".tmp":
			return filepath.SkipDir
		case d.IsDir():
			return nil
		}
		key, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		var o archiveObject
		if o.info, err = os.Stat(path); err != nil {
			return err
		}
		if o.data, err = os.ReadFile(path); err != nil {
			return err
		}
		objects[filepath.ToSlash(key)] = o
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return objects
}

// waitTakeover waits until T passes the killed worker's plan, moved by
// the successor's worker, and checks that the plan's range was published
// as planned: its segment names the object and the range.
func (tc *tieringCrashCluster) waitTakeover(ctx context.Context, crash tieringCrash, successor *nodeProcess) tiering.Head {
	tc.t.Helper()
	var head tiering.Head
	tc.waitFor(ctx, 30*time.Second, crash.step+": the successor publishing the plan", func() (bool, string) {
		var err error
		head, err = tiering.ReadHead(ctx, tc.etcd)
		return err == nil && head.T >= crash.plan.End, fmt.Sprintf("head %+v, %v", head, err)
	})
	tc.waitTieringLeader(ctx, successor)
	raw, err := os.ReadFile(filepath.Join(tc.archiveDir, crash.plan.Manifest))
	if err != nil {
		tc.t.Fatalf("%s: the plan's segment: %v", crash.step, err)
	}
	entry, err := tiering.DecodeManifest(raw)
	if err != nil || entry.First != crash.plan.First || entry.End != crash.plan.End || entry.Object != crash.plan.Object {
		tc.t.Fatalf("%s: segment %s holds %+v (%v); the plan was %+v", crash.step, crash.plan.Manifest, entry, err, crash.plan)
	}
	return head
}

// checkNotOverwritten: every object recorded at a kill is still there
// with the same bytes, in the same file (the file store links a staged
// file to its key and never replaces one).
func (tc *tieringCrashCluster) checkNotOverwritten(crashes []tieringCrash) {
	tc.t.Helper()
	now := readArchiveObjects(tc.t, tc.archiveDir)
	for _, crash := range crashes {
		for key, was := range crash.objects {
			is, ok := now[key]
			switch {
			case !ok:
				tc.t.Fatalf("%s: %s is gone", crash.step, key)
			case !bytes.Equal(is.data, was.data):
				tc.t.Fatalf("%s: %s was overwritten: %d bytes at the kill, %d now", crash.step, key, len(was.data), len(is.data))
			case !os.SameFile(is.info, was.info) || !is.info.ModTime().Equal(was.info.ModTime()):
				tc.t.Fatalf("%s: %s was replaced by another file with the same bytes", crash.step, key)
			}
		}
	}
}

// waitArchivedToC waits until T equals the committed watermark C.
func (tc *tieringCrashCluster) waitArchivedToC(ctx context.Context) tiering.Head {
	tc.t.Helper()
	var head tiering.Head
	tc.waitFor(ctx, 30*time.Second, "T reaching C", func() (bool, string) {
		st, err := tc.c.Status(ctx)
		if err != nil {
			return false, err.Error()
		}
		if head, err = tiering.ReadHead(ctx, tc.etcd); err != nil {
			return false, err.Error()
		}
		return st.Committed > 0 && head.T == st.Committed, fmt.Sprintf("T=%d, C=%d", head.T, st.Committed)
	})
	return head
}

// checkArchive runs verify against the log, and checks the archive's
// rows of [0, T) (read from the files, nothing from the nodes) against
// the producers' history and the log's read of the same range.
func (tc *tieringCrashCluster) checkArchive(head tiering.Head, ops []history.Op) {
	t := tc.t
	t.Helper()
	var etcd []string
	for _, n := range tc.nodes {
		etcd = append(etcd, n.etcdClient)
	}
	out := runArchiveCLI(t, "verify", "--archive", "file://"+tc.archiveDir, "--etcd", strings.Join(etcd, ","),
		"--grpc", tc.nodes[2].grpcAddr, "--json", "--progress", "0").ok(t, "verify")
	var sum verifySummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("verify --json: %v\n%s", err, out)
	}
	if !sum.OK || int64(sum.Files) != head.Files || sum.End != head.T || sum.PastT != 0 || sum.Unlisted != 0 || sum.ComparedFiles != sum.Files {
		t.Fatalf("verify: %+v; head %+v", sum, head)
	}

	archived := readArchiveHistory(t, tc.archiveDir, head)
	report, violations := history.Check(ops, archived)
	for _, v := range violations {
		t.Error("archive:", v)
	}
	if report.Acked == 0 || report.Acked != report.Sent {
		t.Errorf("archive: %v: every message sent should be acknowledged", report)
	}
	logged := fullRead(t, tc.nodes[2].grpcAddr).Below(head.T)
	if err := history.SameRead(archived, logged); err != nil {
		t.Errorf("the archive and the log differ: %v", err)
	}
	if a, l := fmt.Sprint(mergeHoles(archived.Holes)), fmt.Sprint(mergeHoles(logged.Holes)); a != l {
		t.Errorf("the archive's holes %s, the log's %s", a, l)
	}
	t.Logf("archive: %v", report)
}

// readArchiveHistory reads every file's rows: they must tile [0, T).
func readArchiveHistory(t *testing.T, dir string, head tiering.Head) history.Read {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "dt=*", "*.parquet"))
	if err != nil || int64(len(paths)) != head.Files || head.First != 0 {
		t.Fatalf("%d files (%v) for head %+v", len(paths), err, head)
	}
	sort.Slice(paths, func(i, j int) bool { return filepath.Base(paths[i]) < filepath.Base(paths[j]) })
	read := history.Read{Committed: head.T}
	next := head.First
	for _, path := range paths {
		f := openArchiveFile(t, path)
		meta := f.Meta()
		if meta.First != next {
			t.Fatalf("%s starts at %d, the files before it end at %d", path, meta.First, next)
		}
		for _, h := range meta.Holes {
			read.Holes = append(read.Holes, [2]uint64{h.First, h.End})
		}
		err := f.Read(context.Background(), meta.First, meta.End, func(m *orderlogpb.StoredMessage) error {
			name, seqText, ok := strings.Cut(string(m.Message.Value), ":")
			seq, err := strconv.ParseUint(seqText, 10, 64)
			if !ok || err != nil {
				return fmt.Errorf("offset %d: unexpected value %q", m.Offset, m.Message.Value)
			}
			read.Messages = append(read.Messages, history.Logged{Offset: m.Offset, Producer: name, Seq: seq})
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		next = meta.End
	}
	if next != head.T {
		t.Fatalf("the files end at %d, T is %d", next, head.T)
	}
	return read
}

// mergeHoles joins touching holes (the log reports them by page, the
// archive by file).
func mergeHoles(holes [][2]uint64) [][2]uint64 {
	var out [][2]uint64
	for _, h := range holes {
		if n := len(out); n > 0 && out[n-1][1] == h[0] {
			out[n-1][1] = h[1]
			continue
		}
		out = append(out, h)
	}
	return out
}
