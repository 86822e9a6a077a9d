package sequencer

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"orderlog/ingest/ledger"
)

// childCheckpointStepEnv names the checkpoint step at which the child
// sequencer of TestSIGKILLDuringACheckpoint stops and says so.
const childCheckpointStepEnv = "ORDERLOG_SEQ_CHILD_CHECKPOINT_STEP"

// checkpointStopMarker is what the child prints when it reached the step.
const checkpointStopMarker = "CHECKPOINT-STOPPED-AT "

// TestCheckpointingSequencerChildProcess is not a test: it is the body of
// the child process TestSIGKILLDuringACheckpoint starts and kills. It
// checkpoints every 30 records and, at the second checkpoint's given step,
// prints the marker and waits to be killed (granting all the while).
func TestCheckpointingSequencerChildProcess(t *testing.T) {
	step := os.Getenv(childCheckpointStepEnv)
	if step == "" {
		t.Skip("runs only as the child of TestSIGKILLDuringACheckpoint")
	}
	var members []ledger.Member
	if err := json.Unmarshal([]byte(os.Getenv(childStoresEnv)), &members); err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, members: members, dialer: ledger.NewGRPCDialer()}
	cli, err := newEtcdClient(os.Getenv(childEtcdEnv))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", os.Getenv(childAddrEnv))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Address: lis.Addr().String(), Etcd: cli, Ledgers: c.ledgerControl(cli), Logger: testLogger(t)}
	checkpointEvery(30)(&cfg)
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.checkpointStep = func(s string) error {
		if s == step && n.CheckpointStatus().Written > 0 {
			fmt.Println(checkpointStopMarker + s)
			select {} // until killed
		}
		return nil
	}
	serveUntilKilled(lis, n)
}

// TestSIGKILLDuringACheckpoint: a leader process is killed (SIGKILL: no
// resign, no lease revoke, nothing tidied) after each step of a
// checkpoint; the standby takes over from what is left on disk and in
// etcd, every acknowledged offset is Written where it was acknowledged,
// nothing is decided twice, the offsets read before the kill are decided
// the same after it, and the successor's own checkpoints build on it.
func TestSIGKILLDuringACheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes and waits out their session TTL")
	}
	for _, step := range []string{"appended", "sealed", "switched", "deleted", "truncated"} {
		t.Run(step, func(t *testing.T) { sigkillAtCheckpointStep(t, step) })
	}
}

func sigkillAtCheckpointStep(t *testing.T, step string) {
	ctx := context.Background()
	c := newTestCluster(t)
	c.configure = checkpointEvery(30)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	childAddr := lis.Addr().String()
	lis.Close()
	stores, _ := json.Marshal(c.members)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCheckpointingSequencerChildProcess$", "-test.v")
	cmd.Env = append(os.Environ(), childEtcdEnv+"="+c.etcd.Endpoint(), childStoresEnv+"="+string(stores),
		childAddrEnv+"="+childAddr, childCheckpointStepEnv+"="+step)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	stopped := watchForMarker(stdout)

	in := c.newIngest(ctx, "ingest-1")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if addr, _ := LeaderAddress(ctx, c.cli); addr == childAddr && in.connect(ctx) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child sequencer never led")
		}
		time.Sleep(20 * time.Millisecond)
	}
	standby := c.startNode()
	for i := 0; ; i++ {
		select {
		case <-stopped:
		default:
			if i == 200 {
				t.Fatal("the child never reached the step")
			}
			in.produce(ctx, 2)
			continue
		}
		break
	}
	before, cBefore := readCheckpointedMap(ctx, t, c, in.acked[len(in.acked)-1].Range.End)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	in.writeOrRegrant(ctx, in.grantAfterFailover(ctx, t, 3))
	in.produce(ctx, 10)
	after, cAfter := readCheckpointedMap(ctx, t, c, in.acked[len(in.acked)-1].Range.End)
	checkCommitMap(t, after, cAfter, in)
	sameBelow(t, before, after, cBefore)
	// The successor checkpoints on top of what the killed one left.
	epoch := standby.node.Status().Epoch
	in.produce(ctx, 40)
	waitCheckpoint(ctx, t, c, epoch, 0)
	again, cAgain := readCheckpointedMap(ctx, t, c, in.acked[len(in.acked)-1].Range.End)
	checkCommitMap(t, again, cAgain, in)
	sameBelow(t, after, again, cAfter)
}

// watchForMarker drains the child's output and closes the returned
// channel when it prints checkpointStopMarker.
func watchForMarker(r io.Reader) <-chan struct{} {
	stopped := make(chan struct{})
	go func() {
		s := bufio.NewScanner(r)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		seen := false
		for s.Scan() {
			if !seen && strings.Contains(s.Text(), checkpointStopMarker) {
				seen = true
				close(stopped)
			}
		}
		io.Copy(io.Discard, r)
	}()
	return stopped
}
