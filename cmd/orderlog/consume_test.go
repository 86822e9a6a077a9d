package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
)

// consumerProcess is `orderlog consume` as a child process, its stdout (the
// messages it printed) in a file of its own.
type consumerProcess struct {
	cmd    *exec.Cmd
	stdout string
	stderr string
}

func startConsumer(t *testing.T, args ...string) *consumerProcess {
	t.Helper()
	dir := t.TempDir()
	p := &consumerProcess{stdout: dir + "/stdout", stderr: dir + "/stderr"}
	out, err := os.Create(p.stdout)
	if err != nil {
		t.Fatal(err)
	}
	errOut, err := os.Create(p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(os.Args[0], append([]string{"consume"}, args...)...)
	p.cmd.Env = append(os.Environ(), runMainEnv+"=1")
	p.cmd.Stdout, p.cmd.Stderr = out, errOut
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	errOut.Close()
	t.Cleanup(p.kill)
	return p
}

func (p *consumerProcess) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
	}
}

// printed is one message line of `orderlog consume`.
type printed struct {
	Offset     uint64  `json:"offset"`
	Key        string  `json:"key"`
	Value      *string `json:"value"`
	Partition  uint32  `json:"partition"`
	Generation uint64  `json:"generation"`
}

// lines parses what the process printed so far (a line cut short by a
// kill is left out).
func (p *consumerProcess) lines(t *testing.T) []printed {
	t.Helper()
	f, err := os.Open(p.stdout)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []printed
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m printed
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Value == nil {
			continue // a skipped range, or a line cut short
		}
		out = append(out, m)
	}
	return out
}

// keyedProducer logs messages "<i>" with keys "k<i mod keys>" to topic in
// frames of 20, and records each acknowledged offset's value.
func keyedProducer(ctx context.Context, c *client.Client, topic string, n, keys int, pause time.Duration, acked map[uint64]string, mu *sync.Mutex) error {
	return keyedProducerFrom(ctx, c, topic, 0, n, keys, pause, acked, mu)
}

// keyedProducerFrom is keyedProducer for the values first, first+1, ...,
// first+n-1.
func keyedProducerFrom(ctx context.Context, c *client.Client, topic string, first, n, keys int, pause time.Duration, acked map[uint64]string, mu *sync.Mutex) error {
	p, err := c.NewProducer(ctx, "src-"+topic, client.ProducerOptions{})
	if err != nil {
		return err
	}
	defer p.Close()
	for i := first; i < first+n; i += 20 {
		var frame []*orderlogpb.Message
		for j := i; j < min(first+n, i+20); j++ {
			frame = append(frame, &orderlogpb.Message{Topic: topic, Key: []byte(fmt.Sprintf("k%d", j%keys)), Value: []byte(fmt.Sprint(j))})
		}
		acks, err := p.Produce(ctx, frame...)
		if err != nil {
			return err
		}
		mu.Lock()
		for k, a := range acks {
			acked[a.Offset] = string(frame[k].Value)
		}
		mu.Unlock()
		time.Sleep(pause) // a stream, not a burst
	}
	return nil
}

// checkOrderPerPartition fails unless each (partition, generation) run of a
// member's output is in increasing offset order.
func checkOrderPerPartition(t *testing.T, who string, lines []printed) {
	t.Helper()
	type run struct {
		p   uint32
		gen uint64
	}
	last := map[run]uint64{}
	for _, m := range lines {
		r := run{m.Partition, m.Generation}
		if prev, ok := last[r]; ok && m.Offset <= prev {
			t.Fatalf("%s: partition %d generation %d: offset %d after %d", who, m.Partition, m.Generation, m.Offset, prev)
		}
		last[r] = m.Offset
	}
}

// TestGroupMembersSurviveAKillAndAJoin: three `orderlog consume` processes
// share a topic's partitions while a producer writes; one is SIGKILLed
// mid-stream and a fourth joins. Every acknowledged message is printed by
// some member (at least once), each member prints each partition in
// global order, and the group ends with a commit at the end of every
// partition.
func TestGroupMembersSurviveAKillAndAJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev process and four consumer processes")
	}
	srv, c := startDev(t)
	defer srv.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.CreateTopicWith(ctx, &orderlogpb.CreateTopicRequest{Name: "orders", Partitions: 8}); err != nil {
		t.Fatal(err)
	}
	acked := map[uint64]string{}
	var mu sync.Mutex
	produced := make(chan error, 1)
	go func() { produced <- keyedProducer(ctx, c, "orders", 6000, 50, 2*time.Millisecond, acked, &mu) }()
	member := func() *consumerProcess {
		return startConsumer(t, "--addr", srv.grpcAddr, "--group", "g", "--topic", "orders", "--commit-interval", "100ms",
			"--session-timeout", "3s")
	}
	members := []*consumerProcess{member(), member(), member()}
	waitPrinted := func(p *consumerProcess, n int) {
		t.Helper()
		for len(p.lines(t)) < n {
			if ctx.Err() != nil {
				t.Fatalf("a member printed %d messages, want %d", len(p.lines(t)), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitPrinted(members[1], 200)
	members[1].kill()
	t.Logf("killed member 1 after it printed %d messages", len(members[1].lines(t)))
	members = append(members, member())
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	seen := func() map[uint64]bool {
		got := map[uint64]bool{}
		for _, p := range members {
			for _, m := range p.lines(t) {
				got[m.Offset] = true
			}
		}
		return got
	}
	for {
		got := seen()
		missing := 0
		for off := range acked {
			if !got[off] {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d acknowledged messages were never printed", missing, len(acked))
		}
		time.Sleep(100 * time.Millisecond)
	}
	printedTotal := 0
	for i, p := range members {
		lines := p.lines(t)
		printedTotal += len(lines)
		checkOrderPerPartition(t, fmt.Sprintf("member %d", i), lines)
		for _, m := range lines {
			if want, ok := acked[m.Offset]; ok && *m.Value != want {
				t.Fatalf("member %d printed offset %d as %q, logged as %q", i, m.Offset, *m.Value, want)
			}
		}
	}
	t.Logf("%d messages acknowledged, %d lines printed by 4 members (%d again after the kill or a rebalance)",
		len(acked), printedTotal, printedTotal-len(acked))
	// the live members commit what they printed: every partition reaches C
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for {
		d, err := c.DescribeGroup(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		behind := 0
		for _, p := range d.Partitions {
			if p.Committed == nil || *p.Committed < lastOffsetOfPartition(acked, p.Partition, members, t)+1 {
				behind++
			}
		}
		if behind == 0 && len(d.Members) == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the group's commits did not reach the end of its partitions (C %d): %v", st.Committed, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lastOffsetOfPartition is the greatest acknowledged offset some member
// printed for partition p.
func lastOffsetOfPartition(acked map[uint64]string, p uint32, members []*consumerProcess, t *testing.T) uint64 {
	var last uint64
	for _, m := range members {
		for _, l := range m.lines(t) {
			if _, ok := acked[l.Offset]; ok && l.Partition == p {
				last = max(last, l.Offset)
			}
		}
	}
	return last
}

// TestCopyToIsExactlyOnceAcrossKills: `orderlog consume --copy-to` copies a
// topic while it is SIGKILLed 20 times in the middle of copying and
// started again; at the end every input is copied exactly once, and each
// key's copies are in input order.
func TestCopyToIsExactlyOnceAcrossKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev process and kills a consumer process 20 times")
	}
	srv, c := startDev(t)
	defer srv.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := c.CreateTopicWith(ctx, &orderlogpb.CreateTopicRequest{Name: "in", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	const runs = 20
	acked := map[uint64]string{}
	var mu sync.Mutex
	copier := func() *consumerProcess {
		return startConsumer(t, "--addr", srv.grpcAddr, "--group", "copy", "--topic", "in", "--copy-to", "out", "--session-timeout", "2s")
	}
	copies := func() (map[string]int, map[string][]int) {
		count, order := map[string]int{}, map[string][]int{}
		err := c.Query(ctx, &orderlogpb.QueryRequest{Topic: "out"}, func(p *client.Page) error {
			for _, m := range p.Messages {
				v := string(m.Message.Value)
				count[v]++
				var i int
				fmt.Sscan(v, &i)
				order[string(m.Message.Key)] = append(order[string(m.Message.Key)], i)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return count, order
	}
	inputs := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	// Inputs stream in, 20 at a time, all through each run; a run is
	// killed at a random moment after it copied its first (however long
	// the process took to start, on a loaded machine), so in the middle
	// of copying unless it caught up with the stream.
	rng := rand.New(rand.NewPCG(7, 11))
	midCopy, before := 0, 0
	for run := 0; run < runs; run++ {
		p := copier()
		stop := make(chan struct{})
		produced := make(chan error, 1)
		go func() {
			for {
				select {
				case <-stop:
					produced <- nil
					return
				default:
				}
				if err := keyedProducerFrom(ctx, c, "in", inputs(), 20, 40, 10*time.Millisecond, acked, &mu); err != nil {
					produced <- err
					return
				}
			}
		}()
		for {
			if count, _ := copies(); len(count) > before {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("run %d copied nothing", run)
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
		p.kill()
		close(stop)
		if err := <-produced; err != nil {
			t.Fatal(err)
		}
		count, _ := copies()
		if len(count) < inputs() {
			midCopy++
		}
		before = len(count)
	}
	// Every run copied before its kill (the loop waits for it); how many
	// also left inputs uncopied depends on how fast the copier keeps up
	// with the stream (8-20 of 20 seen), but a copy never cut short
	// would not test the loop's recovery.
	if midCopy == 0 {
		t.Fatalf("none of %d runs was killed with inputs left to copy: the kills did not cut the copy short", runs)
	}
	total := inputs()
	count, _ := copies()
	t.Logf("after %d kills (%d of them mid-copy): %d of %d inputs copied", runs, midCopy, len(count), total)
	last := copier()
	for {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WaitCommitted(ctx, st.Committed); err != nil {
			t.Fatal(err)
		}
		count, order := copies()
		for v, n := range count {
			if n != 1 {
				t.Fatalf("input %s copied %d times", v, n)
			}
		}
		if len(count) == total {
			for key, values := range order {
				for i := 1; i < len(values); i++ {
					if values[i] <= values[i-1] {
						t.Fatalf("key %s: copy of input %d after that of %d", key, values[i], values[i-1])
					}
				}
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d inputs copied in the end", len(count), total)
		}
		time.Sleep(200 * time.Millisecond)
	}
	last.kill()
}

// TestTopicsAndConsumeCommands: `orderlog topics` creates a topic with its
// partitions and lists it; `orderlog consume --max` prints messages with
// their partitions in order and commits them on exit; `--describe` shows
// the commits and the lag.
func TestTopicsAndConsumeCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev process")
	}
	srv, c := startDev(t)
	defer srv.stop()
	addr := []string{"--addr", srv.grpcAddr}
	cli := func(args ...string) cliRun { return runCLI(t, append(args, addr...)...) }
	if out := cli("topics", "create", "orders", "--partitions", "4").ok(t, "topics create"); !strings.Contains(out, "4 partitions") {
		t.Fatalf("topics create printed %q", out)
	}
	if run := cli("topics", "create", "orders"); run.exit == 0 || !strings.Contains(run.stderr, "TOPIC_EXISTS") {
		t.Fatalf("creating it again: exit %d, stderr %q", run.exit, run.stderr)
	}
	if out := cli("topics", "list").ok(t, "topics list"); !regexp.MustCompile(`(?m)^orders\s+4\s+delete`).MatchString(out) {
		t.Fatalf("topics list printed %q", out)
	}
	if out := cli("topics", "partitions", "orders").ok(t, "topics partitions"); strings.Count(out, "\n") != 6 {
		t.Fatalf("topics partitions printed %q", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	acked := map[uint64]string{}
	var mu sync.Mutex
	if err := keyedProducer(ctx, c, "orders", 100, 10, 0, acked, &mu); err != nil {
		t.Fatal(err)
	}
	out := cli("consume", "--group", "g", "--topic", "orders", "--max", "100").ok(t, "consume --max")
	var lines []printed
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m printed
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if m.Value == nil || acked[m.Offset] != *m.Value {
			t.Fatalf("printed %q at offset %d; logged %q", l, m.Offset, acked[m.Offset])
		}
		lines = append(lines, m)
	}
	if len(lines) != 100 {
		t.Fatalf("consume --max 100 printed %d messages", len(lines))
	}
	checkOrderPerPartition(t, "consume", lines)
	var desc orderlogpb.GroupDescription
	if err := protojson.Unmarshal([]byte(cli("consume", "--group", "g", "--describe", "--json").ok(t, "describe")), &desc); err != nil {
		t.Fatal(err)
	}
	last := map[uint32]uint64{}
	for _, m := range lines {
		last[m.Partition] = max(last[m.Partition], m.Offset)
	}
	for _, p := range desc.Partitions {
		if p.Committed == nil || *p.Committed != last[p.Partition]+1 || p.Lag != desc.Committed-*p.Committed {
			t.Fatalf("partition %d: committed %v lag %d; printed up to %d, C %d", p.Partition, p.Committed, p.Lag, last[p.Partition], desc.Committed)
		}
	}
	if table := cli("consume", "--group", "g", "--describe").ok(t, "describe"); !regexp.MustCompile(`(?m)^orders\s+1\s+\d+\s+\d+\s+\d+`).MatchString(table) {
		t.Fatalf("describe printed %q", table)
	}
}
