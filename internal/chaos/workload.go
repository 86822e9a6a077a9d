package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"orderlog/client"
	"orderlog/internal/history"
	"orderlog/proto/orderlogpb"
)

// Topic is the topic every chaos message goes to.
const Topic = "chaos"

// value is a message's value: "<producer>:<seq>", so any read names the
// (producer, seq) it logged.
func value(producer string, seq uint64) string { return producer + ":" + strconv.FormatUint(seq, 10) }

// parseValue reads a value back; HTTP JSON payloads come back as a JSON
// string, quotes included.
func parseValue(raw []byte) (string, uint64, error) {
	text := strings.Trim(string(raw), `"`)
	name, seqText, ok := strings.Cut(text, ":")
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if !ok || err != nil {
		return "", 0, fmt.Errorf("unexpected value %q", raw)
	}
	return name, seq, nil
}

// Workload runs producers and tailing readers and records their history.
type Workload struct {
	Recorder *history.Recorder
	Pages    *history.PageLog
	// Errors are failures the clients saw that a correct system never
	// causes (a fenced producer, a refused seq, a malformed answer).
	errs chan error
	wg   sync.WaitGroup
	// retries notes each failed HTTP attempt (the node, the error), for
	// the cycle's log: HTTP producers cannot probe a node as gRPC clients
	// do, and where their time went is otherwise invisible.
	retries struct {
		sync.Mutex
		notes []string
	}
}

func (w *Workload) noteRetry(format string, args ...any) {
	w.retries.Lock()
	w.retries.notes = append(w.retries.notes, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	w.retries.Unlock()
}

// TakeRetries returns the HTTP retries noted since the last call.
func (w *Workload) TakeRetries() []string {
	w.retries.Lock()
	defer w.retries.Unlock()
	notes := w.retries.notes
	w.retries.notes = nil
	return notes
}

func NewWorkload() *Workload {
	return &Workload{Recorder: history.NewRecorder(), Pages: &history.PageLog{}, errs: make(chan error, 1000)}
}

func (w *Workload) fail(err error) {
	select {
	case w.errs <- err:
	default:
	}
}

// Wait waits for every client to stop and returns the errors they saw.
func (w *Workload) Wait() []error {
	w.wg.Wait()
	close(w.errs)
	var errs []error
	for err := range w.errs {
		errs = append(errs, err)
	}
	return errs
}

// GRPCProducer runs an idempotent client.Producer named name until ctx
// ends: frames of 1–4 messages, up to 16 in flight.
func (w *Workload) GRPCProducer(ctx context.Context, c *client.Client, name string, endpoint func(string)) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.runGRPCProducer(ctx, c, name, endpoint)
	}()
}

func (w *Workload) runGRPCProducer(ctx context.Context, c *client.Client, name string, endpoint func(string)) {
	var producer *client.Producer
	for producer == nil {
		initCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		p, err := c.NewProducer(initCtx, name, client.ProducerOptions{MaxInFlight: 16})
		cancel()
		if ctx.Err() != nil {
			return
		}
		producer = p
		if err != nil {
			producer = nil
		}
	}
	defer producer.Close()
	var waiters sync.WaitGroup
	defer waiters.Wait()
	for n := 0; ctx.Err() == nil; n++ {
		endpoint(producer.Endpoint())
		first := producer.NextSeq()
		messages := make([]*orderlogpb.Message, 1+n%4)
		sent := time.Now()
		for i := range messages {
			seq := first + uint64(i)
			messages[i] = &orderlogpb.Message{Topic: Topic, Value: []byte(value(name, seq))}
			w.Recorder.Sent(name, seq, sent)
		}
		pending, err := producer.Send(ctx, messages...)
		if err != nil {
			if ctx.Err() == nil {
				w.fail(fmt.Errorf("%s: send: %w", name, err))
			}
			return
		}
		waiters.Add(1)
		go func() {
			defer waiters.Done()
			w.awaitFrame(name, pending)
		}()
		time.Sleep(20 * time.Millisecond) // pacing (a history porcupine can check), not an assertion
	}
}

// awaitFrame records a frame's acks; frames still unresolved when the run
// ends are simply unacknowledged.
func (w *Workload) awaitFrame(name string, pending *client.Pending) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	acks, err := pending.Wait(ctx)
	if err != nil {
		if ctx.Err() == nil && !strings.Contains(err.Error(), "closed") {
			w.fail(fmt.Errorf("%s: frame at seq %d: %w", name, pending.FirstSeq(), err))
		}
		return
	}
	now := time.Now()
	for i, ack := range acks {
		if err := w.Recorder.Acked(name, pending.FirstSeq()+uint64(i), ack.Offset, now); err != nil {
			w.fail(err)
		}
	}
}

// HTTPProducer runs a producer over HTTP until ctx ends: one message per
// request, sent again unchanged (to the next node) until it is
// acknowledged. With idempotencyKeys each message carries an
// Idempotency-Key; else the producer registers with POST /v1/producers
// and sends Producer-Id/Epoch/Seq.
func (w *Workload) HTTPProducer(ctx context.Context, httpAddrs []string, name string, idempotencyKeys bool) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		// An HTTP client cannot probe a node as the gRPC producer does: it
		// times out. Acks take milliseconds; 2 s leaves room for a
		// sequencer failover, and a move off a live node is a clean handover.
		p := &httpProducer{w: w, name: name, addrs: httpAddrs, keys: idempotencyKeys,
			client: &http.Client{Timeout: 2 * time.Second}}
		p.run(ctx)
	}()
}

type httpProducer struct {
	w      *Workload
	name   string
	addrs  []string
	next   int // index of the node to use
	keys   bool
	client *http.Client
	id     uint64
	epoch  uint64
}

func (p *httpProducer) run(ctx context.Context) {
	var seq uint64
	if !p.keys {
		for ctx.Err() == nil && p.register(ctx, &seq) != nil {
			p.next++
			pause(ctx, 100*time.Millisecond)
		}
	}
	for ; ctx.Err() == nil; seq++ {
		p.w.Recorder.Sent(p.name, seq, time.Now())
		for ctx.Err() == nil {
			offset, err := p.send(ctx, seq)
			if err == nil {
				if err := p.w.Recorder.Acked(p.name, seq, offset, time.Now()); err != nil {
					p.w.fail(err)
				}
				break
			}
			var fatal fatalError
			if asFatal(err, &fatal) {
				p.w.noteRetry("%s seq %d on %s: FATAL, the producer stops: %v", p.name, seq, p.addr(), err)
				p.w.fail(fmt.Errorf("%s: seq %d: %w", p.name, seq, err))
				return
			}
			p.w.noteRetry("%s seq %d on %s: %v", p.name, seq, p.addr(), err)
			p.next++ // the node failed: the same message goes to the next
			pause(ctx, 50*time.Millisecond)
		}
		pause(ctx, 20*time.Millisecond)
	}
}

func (p *httpProducer) addr() string { return p.addrs[p.next%len(p.addrs)] }

func (p *httpProducer) register(ctx context.Context, seq *uint64) error {
	body, _ := json.Marshal(map[string]string{"name": p.name})
	var resp struct {
		ProducerID uint64 `json:"producer_id"`
		Epoch      uint64 `json:"epoch"`
		NextSeq    uint64 `json:"next_seq"`
	}
	if err := p.post(ctx, "/v1/producers", nil, body, &resp); err != nil {
		return err
	}
	p.id, p.epoch, *seq = resp.ProducerID, resp.Epoch, resp.NextSeq
	return nil
}

func (p *httpProducer) send(ctx context.Context, seq uint64) (uint64, error) {
	body, _ := json.Marshal(map[string]string{"topic": Topic, "payload": ""})
	body = bytes.Replace(body, []byte(`"payload":""`), []byte(`"payload":"`+value(p.name, seq)+`"`), 1)
	header := http.Header{}
	if p.keys {
		header.Set("Idempotency-Key", value(p.name, seq))
	} else {
		header.Set("Producer-Id", strconv.FormatUint(p.id, 10))
		header.Set("Producer-Epoch", strconv.FormatUint(p.epoch, 10))
		header.Set("Producer-Seq", strconv.FormatUint(seq, 10))
	}
	var ack struct {
		Offset *uint64 `json:"offset"`
	}
	if err := p.post(ctx, "/v1/messages", header, body, &ack); err != nil {
		return 0, err
	}
	if ack.Offset == nil {
		return 0, fatalError{fmt.Errorf("acknowledged without an offset")}
	}
	return *ack.Offset, nil
}

// fatalError is an answer a retry cannot change.
type fatalError struct{ err error }

func (e fatalError) Error() string { return e.err.Error() }

func asFatal(err error, target *fatalError) bool {
	f, ok := err.(fatalError)
	if ok {
		*target = f
	}
	return ok
}

func (p *httpProducer) post(ctx context.Context, path string, header http.Header, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.addr()+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated:
		return json.Unmarshal(raw, out)
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout,
		resp.StatusCode == http.StatusConflict && bytes.Contains(raw, []byte(`"IDEMPOTENCY_KEY_IN_FLIGHT"`)): // the first try has no outcome yet
		return fmt.Errorf("%s: %s", resp.Status, raw) // ours to retry
	default:
		return fatalError{fmt.Errorf("%s %s: %s", path, resp.Status, bytes.TrimSpace(raw))}
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Tailer follows the log from offset 0 until ctx ends and records every
// page it receives.
func (w *Workload) Tailer(ctx context.Context, c *client.Client, name string) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		started := time.Now()
		var from uint64
		err := c.Tail(ctx, 0, func(p *client.Page) error {
			page := history.Page{Reader: name, From: from, Next: p.NextOffset, Started: started, Received: time.Now()}
			for _, h := range p.Skipped {
				page.Holes = append(page.Holes, [2]uint64{h.First, h.End})
			}
			for _, m := range p.Messages {
				producer, seq, err := parseValue(m.Message.Value)
				if err != nil {
					return fmt.Errorf("offset %d: %w", m.Offset, err)
				}
				page.Messages = append(page.Messages, history.Logged{Offset: m.Offset, Producer: producer, Seq: seq})
			}
			w.Pages.Add(page)
			from = p.NextOffset
			return nil
		})
		if err != nil && ctx.Err() == nil {
			w.fail(fmt.Errorf("tailer %s: %w", name, err))
		}
	}()
}

// FullRead reads [0, C) from the node at addr only and returns it.
func FullRead(ctx context.Context, addr string) (history.Read, error) {
	c, err := client.Dial(addr)
	if err != nil {
		return history.Read{}, err
	}
	defer c.Close()
	st, err := c.Status(ctx)
	if err != nil {
		return history.Read{}, err
	}
	read := history.Read{Committed: st.Committed}
	err = c.Read(ctx, 0, 0, func(p *client.Page) error {
		for _, h := range p.Skipped {
			read.Holes = append(read.Holes, [2]uint64{h.First, h.End})
		}
		for _, m := range p.Messages {
			producer, seq, err := parseValue(m.Message.Value)
			if err != nil {
				return fmt.Errorf("offset %d: %w", m.Offset, err)
			}
			read.Messages = append(read.Messages, history.Logged{Offset: m.Offset, Producer: producer, Seq: seq})
		}
		read.Committed = max(read.Committed, p.NextOffset)
		return nil
	})
	return read, err
}
