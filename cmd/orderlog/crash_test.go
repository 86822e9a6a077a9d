package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/internal/history"
	"orderlog/proto/orderlogpb"
)

// serverProcess is `orderlog dev` running as a real child process.
type serverProcess struct {
	t        *testing.T
	dataDir  string
	grpcAddr string
	httpAddr string
	cmd      *exec.Cmd
	log      *os.File
}

// newDevProcess is an `orderlog dev` process of the test binary, not yet
// started, with its own data directory, addresses and log file.
func newDevProcess(t *testing.T) *serverProcess {
	t.Helper()
	logFile, err := os.CreateTemp(t.TempDir(), "server-*.log")
	if err != nil {
		t.Fatal(err)
	}
	return &serverProcess{t: t, dataDir: t.TempDir(), grpcAddr: freeAddr(t), httpAddr: freeAddr(t), log: logFile}
}

// startDev starts a dev process and returns it with a client of it, once it
// is ready; the client is closed at the end of the test.
func startDev(t *testing.T) (*serverProcess, *client.Client) {
	t.Helper()
	srv := newDevProcess(t)
	srv.start()
	c, err := client.Dial(srv.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	srv.waitReady(c)
	return srv, c
}

func (s *serverProcess) start() {
	s.t.Helper()
	s.cmd = startChild(s.t, s.log, "dev", "--data", s.dataDir, "--grpc-addr", s.grpcAddr,
		"--http-addr", s.httpAddr, "--etcd-addr", "127.0.0.1:0")
}

// startChild runs this test binary as `orderlog args...` with its output
// to log. A test that fails half-way must not leave it running: it is
// killed when the test ends.
func startChild(t *testing.T, log *os.File, args ...string) *exec.Cmd {
	t.Helper()
	return startChildEnv(t, log, nil, args...)
}

// startChildEnv is startChild with env added to the child's environment.
func startChildEnv(t *testing.T, log *os.File, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), runMainEnv+"=1"), env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

func (s *serverProcess) kill() {
	s.t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
}

func (s *serverProcess) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		s.kill()
	}
}

// waitReady waits until the server answers Status with a serving leader.
func (s *serverProcess) waitReady(c *client.Client) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		s.t.Fatalf("%v; log in %s", err, s.log.Name())
	}
}

// crashProducer sends numbered messages through an idempotent session and
// records every send and acknowledgement.
type crashProducer struct {
	name     string
	recorder *history.Recorder
	errs     chan error
}

func (p *crashProducer) run(ctx context.Context, c *client.Client, rng *rand.Rand, wg *sync.WaitGroup) {
	defer wg.Done()
	var producer *client.Producer
	for producer == nil {
		initCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		pr, err := c.NewProducer(initCtx, p.name, client.ProducerOptions{MaxInFlight: 16})
		cancel()
		if err == nil {
			producer = pr
		} else if ctx.Err() != nil {
			return
		}
	}
	defer producer.Close()
	var waiters sync.WaitGroup
	for ctx.Err() == nil {
		n := 1 + rng.IntN(4)
		messages := make([]*orderlogpb.Message, n)
		sentAt := time.Now()
		first := producer.NextSeq() // only this goroutine sends
		for i := range messages {
			seq := first + uint64(i)
			messages[i] = &orderlogpb.Message{Topic: "crash", Value: []byte(fmt.Sprintf("%s:%d", p.name, seq))}
			p.recorder.Sent(p.name, seq, sentAt)
		}
		pending, err := producer.Send(ctx, messages...)
		if err != nil {
			if ctx.Err() == nil {
				p.errs <- fmt.Errorf("%s: send: %w", p.name, err)
			}
			break
		}
		if pending.FirstSeq() != first {
			p.errs <- fmt.Errorf("%s: sent at seq %d, expected %d", p.name, pending.FirstSeq(), first)
		}
		waiters.Add(1)
		go func() {
			defer waiters.Done()
			waitCtx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			acks, err := pending.Wait(waitCtx)
			if err != nil {
				p.errs <- fmt.Errorf("%s: frame at seq %d: %w", p.name, pending.FirstSeq(), err)
				return
			}
			now := time.Now()
			for i, ack := range acks {
				if err := p.recorder.Acked(p.name, pending.FirstSeq()+uint64(i), ack.Offset, now); err != nil {
					p.errs <- err
				}
			}
		}()
		time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
	}
	waiters.Wait()
}

// TestCrashRestartHistory runs idempotent producers against a real
// `orderlog dev` process, SIGKILLs it at random moments, restarts it, and
// checks the recorded history against two full reads (DESIGN.md §1).
func TestCrashRestartHistory(t *testing.T) {
	cycles := 3
	if v := os.Getenv("ORDERLOG_SOAK"); v != "" {
		cycles, _ = strconv.Atoi(v)
	}
	srv, c := startDev(t)

	recorder := history.NewRecorder()
	errs := make(chan error, 1000)
	ctx, stopProducers := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		p := &crashProducer{name: fmt.Sprintf("p%d", i), recorder: recorder, errs: errs}
		go p.run(ctx, c, rand.New(rand.NewPCG(uint64(i), 42)), &wg)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for cycle := 0; cycle < cycles; cycle++ {
		time.Sleep(time.Duration(300+rng.IntN(900)) * time.Millisecond)
		srv.kill()
		srv.start()
		srv.waitReady(c)
	}
	// The producers must get acks again after the last restart (and a
	// slow machine must not leave the history without any).
	restarted := time.Now()
	waitAckedAfter(t, recorder, restarted)
	time.Sleep(300 * time.Millisecond)
	stopProducers()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	ops := recorder.Ops()
	var maxAcked uint64
	for _, op := range ops {
		if !op.Acked.IsZero() {
			maxAcked = max(maxAcked, op.Offset+1)
		}
	}
	waitCommittedAt(t, c, maxAcked)
	first := fullRead(t, srv.grpcAddr)
	second := fullRead(t, srv.grpcAddr)
	if fmt.Sprint(first) != fmt.Sprint(second) {
		t.Fatal("two full reads differ")
	}
	report, violations := history.Check(ops, first)
	for _, v := range violations {
		t.Error(v)
	}
	t.Logf("%d kill cycles: %v", cycles, report)
	if report.Acked == 0 {
		t.Fatal("no message was acknowledged")
	}
	srv.stop()
	if t.Failed() {
		raw, _ := os.ReadFile(srv.log.Name())
		t.Logf("server log:\n%s", raw)
	}
}

// waitAckedAfter waits until the history holds an ack from after since.
func waitAckedAfter(t *testing.T, recorder *history.Recorder, since time.Time) {
	t.Helper()
	waitSentAndAckedAfter(t, recorder, time.Time{}, since)
}

// waitSentAndAckedAfter waits until the history holds a message sent after
// sent and acknowledged after acked, and returns the first such ack's time.
func waitSentAndAckedAfter(t *testing.T, recorder *history.Recorder, sent, acked time.Time) time.Time {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var first time.Time
		for _, op := range recorder.Ops() {
			if op.Sent.After(sent) && op.Acked.After(acked) && (first.IsZero() || op.Acked.Before(first)) {
				first = op.Acked
			}
		}
		if !first.IsZero() {
			return first
		}
		if time.Now().After(deadline) {
			t.Fatal("no message was acknowledged in 30 s after the last restart")
		}
	}
}

func waitCommittedAt(t *testing.T, c *client.Client, offset uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitCommitted(ctx, offset); err != nil {
		t.Fatal(err)
	}
}

// fullRead reads [0, C) over a fresh connection and returns it as history.
func fullRead(t *testing.T, addr string) history.Read {
	t.Helper()
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	read := history.Read{Committed: st.Committed}
	err = c.Read(ctx, 0, 0, func(p *client.Page) error {
		for _, h := range p.Skipped {
			read.Holes = append(read.Holes, [2]uint64{h.First, h.End})
		}
		for _, m := range p.Messages {
			name, seqText, ok := strings.Cut(string(m.Message.Value), ":")
			seq, err := strconv.ParseUint(seqText, 10, 64)
			if !ok || err != nil {
				return fmt.Errorf("offset %d: unexpected value %q", m.Offset, m.Message.Value)
			}
			read.Messages = append(read.Messages, history.Logged{Offset: m.Offset, Producer: name, Seq: seq})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(read.Messages) > 0 {
		read.Committed = max(read.Committed, read.Messages[len(read.Messages)-1].Offset+1)
	}
	return read
}
