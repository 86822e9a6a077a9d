package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"orderlog/client"
	"orderlog/internal/apierr"
	"orderlog/internal/history"
	"orderlog/proto/orderlogpb"
)

// logTail follows the log from offset 0 through every kill and restart
// and keeps what it was served: the history of every offset, also of those
// retention deletes later. Offsets deleted before the tail reached them
// are kept as lost ranges (the history check cannot vouch for those).
type logTail struct {
	mu struct {
		sync.Mutex
		read history.Read
		next uint64
		lost [][2]uint64
		errs []error
	}
}

func (l *logTail) run(ctx context.Context, c *client.Client) {
	for ctx.Err() == nil {
		from := l.next()
		err := c.Tail(ctx, from, l.add)
		switch {
		case ctx.Err() != nil:
			return
		case apierr.As(err).Code == apierr.OffsetOutOfRange:
			l.skipToStart(ctx, c, from)
		default:
			l.fail(fmt.Errorf("tail from %d: %w", from, err))
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// skipToStart records [from, log start) as lost: retention deleted it
// before the tail read it.
func (l *logTail) skipToStart(ctx context.Context, c *client.Client, from uint64) {
	st, err := c.Status(ctx)
	if err != nil || st.LogStart <= from {
		time.Sleep(50 * time.Millisecond)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.next == from {
		l.mu.lost = append(l.mu.lost, [2]uint64{from, st.LogStart})
		l.mu.next = st.LogStart
	}
}

func (l *logTail) add(p *client.Page) error {
	logged, err := parseLogged(p)
	if err != nil {
		l.fail(err)
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.read.Messages = append(l.mu.read.Messages, logged...)
	for _, h := range p.Skipped {
		l.mu.read.Holes = append(l.mu.read.Holes, [2]uint64{h.First, h.End})
	}
	l.mu.next = max(l.mu.next, p.NextOffset)
	return nil
}

func (l *logTail) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.mu.errs) < 20 {
		l.mu.errs = append(l.mu.errs, err)
	}
}

func (l *logTail) next() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.next
}

// snapshot is what the tail was served so far, [0, next), with the lost
// ranges as holes; and the lost ranges.
func (l *logTail) snapshot() (history.Read, [][2]uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	read := history.Read{Messages: slices.Clone(l.mu.read.Messages), Committed: l.mu.next}
	read.Holes = append(slices.Clone(l.mu.read.Holes), l.mu.lost...)
	return read, slices.Clone(l.mu.lost)
}

func (l *logTail) errors() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.mu.errs)
}

// parseLogged reads the messages of a page as history entries: every
// value is "producer:seq".
func parseLogged(p *client.Page) ([]history.Logged, error) {
	out := make([]history.Logged, 0, len(p.Messages))
	for _, m := range p.Messages {
		name, seqText, ok := strings.Cut(string(m.Message.Value), ":")
		seq, err := strconv.ParseUint(seqText, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("offset %d: unexpected value %q", m.Offset, m.Message.Value)
		}
		out = append(out, history.Logged{Offset: m.Offset, Producer: name, Seq: seq})
	}
	return out, nil
}

// readFrom reads [from, C) in one Read.
func readFrom(ctx context.Context, c *client.Client, from uint64) (history.Read, error) {
	read := history.Read{Committed: from}
	err := c.Read(ctx, from, 0, func(p *client.Page) error {
		logged, err := parseLogged(p)
		if err != nil {
			return err
		}
		read.Messages = append(read.Messages, logged...)
		for _, h := range p.Skipped {
			read.Holes = append(read.Holes, [2]uint64{h.First, h.End})
		}
		read.Committed = max(read.Committed, p.NextOffset)
		return nil
	})
	return read, err
}

// within is what read says of [first, end): its messages in that range and
// its holes clipped to it and merged where adjacent (two reads may page a
// hole differently), as text to compare.
func within(read history.Read, first, end uint64) string {
	var b strings.Builder
	for _, m := range read.Messages {
		if m.Offset >= first && m.Offset < end {
			fmt.Fprintf(&b, "%d=%s/%d ", m.Offset, m.Producer, m.Seq)
		}
	}
	holes := slices.Clone(read.Holes)
	slices.SortFunc(holes, func(a, b [2]uint64) int { return int(a[0]) - int(b[0]) })
	var merged [][2]uint64
	for _, h := range holes {
		h = [2]uint64{max(h[0], first), min(h[1], end)}
		switch {
		case h[0] >= h[1]:
		case len(merged) > 0 && merged[len(merged)-1][1] == h[0]:
			merged[len(merged)-1][1] = h[1]
		default:
			merged = append(merged, h)
		}
	}
	fmt.Fprintf(&b, "holes %v", merged)
	return b.String()
}

// readBelowStart reads from an offset below the log start: it must fail
// with OFFSET_OUT_OF_RANGE before any message arrives.
func readBelowStart(ctx context.Context, c *client.Client, offset uint64) error {
	var served []uint64
	err := c.Read(ctx, offset, 1, func(p *client.Page) error {
		for _, m := range p.Messages {
			served = append(served, m.Offset)
		}
		return nil
	})
	switch {
	case len(served) > 0:
		return fmt.Errorf("read from %d below the log start served offsets %v", offset, served)
	case err == nil:
		return fmt.Errorf("read from %d below the log start succeeded", offset)
	case apierr.As(err).Code != apierr.OffsetOutOfRange:
		return fmt.Errorf("read from %d below the log start: %w, want OFFSET_OUT_OF_RANGE", offset, err)
	}
	return nil
}

// probeProducer is an exactly-once producer on a raw Produce stream, so
// the test chooses its sequence numbers: before each kill it logs its next
// message, and after the restart it sends that message again and must get
// DUPLICATE with the original offset (DESIGN.md §1.4), though the node
// that acknowledged it is gone, and its ledger may be rolled and deleted.
type probeProducer struct {
	name      string
	conn      *grpc.ClientConn
	recorder  *history.Recorder
	id, epoch uint64
	nextSeq   uint64
	// last is the last message acknowledged: its seq and offset.
	lastSeq, lastOffset uint64
}

func newProbeProducer(ctx context.Context, addr, name string, recorder *history.Recorder) (*probeProducer, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	p := &probeProducer{name: name, conn: conn, recorder: recorder}
	for {
		resp, err := orderlogpb.NewProducerClient(conn).InitProducer(ctx, &orderlogpb.InitProducerRequest{Name: name})
		if err == nil {
			p.id, p.epoch, p.nextSeq = resp.ProducerId, resp.Epoch, resp.NextSeq
			return p, nil
		}
		if ctx.Err() != nil {
			conn.Close()
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sendNext logs the next message and remembers its offset.
func (p *probeProducer) sendNext(ctx context.Context) error {
	seq := p.nextSeq
	p.recorder.Sent(p.name, seq, time.Now())
	ack, err := p.produce(ctx, seq)
	if err != nil {
		return err
	}
	if ack.Duplicate {
		return fmt.Errorf("%s/%d: first send answered DUPLICATE (offset %d)", p.name, seq, ack.Offset)
	}
	if err := p.recorder.Acked(p.name, seq, ack.Offset, time.Now()); err != nil {
		return err
	}
	p.nextSeq, p.lastSeq, p.lastOffset = seq+1, seq, ack.Offset
	return nil
}

// resendLast sends the last acknowledged message again.
func (p *probeProducer) resendLast(ctx context.Context) error {
	ack, err := p.produce(ctx, p.lastSeq)
	switch {
	case err != nil:
		return err
	case !ack.Duplicate || ack.Offset != p.lastOffset:
		return fmt.Errorf("%s/%d resent after a restart: duplicate=%v offset=%d (without offset: %v), want DUPLICATE at %d",
			p.name, p.lastSeq, ack.Duplicate, ack.Offset, ack.DuplicateWithoutOffset, p.lastOffset)
	}
	return nil
}

// produce sends one message at seq on a fresh stream until it is answered
// with an ack or a refusal that is not retryable.
func (p *probeProducer) produce(ctx context.Context, seq uint64) (*orderlogpb.Ack, error) {
	message := &orderlogpb.Message{Topic: "crash", Value: []byte(fmt.Sprintf("%s:%d", p.name, seq))}
	var last error
	for ctx.Err() == nil {
		resp, err := p.produceOnce(ctx, &orderlogpb.ProduceRequest{ProducerId: p.id, Epoch: p.epoch, FirstSeq: seq, Messages: []*orderlogpb.Message{message}})
		switch {
		case err != nil:
			last = err
		case resp.ErrorCode == "" && len(resp.Acks) == 1:
			return resp.Acks[0], nil
		case resp.ErrorCode == "":
			return nil, fmt.Errorf("%s/%d: %d acks for one message", p.name, seq, len(resp.Acks))
		default:
			refusal := &apierr.Error{Code: apierr.Code(resp.ErrorCode), Message: resp.ErrorMessage}
			if refusal.Class() != apierr.ClassRetry {
				return nil, fmt.Errorf("%s/%d: %w", p.name, seq, refusal)
			}
			last = refusal
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("%s/%d: no answer: %w (last: %v)", p.name, seq, ctx.Err(), last)
}

func (p *probeProducer) produceOnce(ctx context.Context, req *orderlogpb.ProduceRequest) (*orderlogpb.ProduceResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stream, err := orderlogpb.NewProducerClient(p.conn).Produce(ctx)
	if err != nil {
		return nil, err
	}
	defer stream.CloseSend()
	if err := stream.Send(req); err != nil {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return nil, errors.New("empty answer")
	}
	return resp, nil
}

// httpReadBelowStart asks the HTTP API for an offset below the log start:
// it must answer 416 with OFFSET_OUT_OF_RANGE.
func httpReadBelowStart(ctx context.Context, httpAddr string, offset uint64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/v1/messages?offset=%d&limit=1", httpAddr, offset), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable || !strings.Contains(string(body), string(apierr.OffsetOutOfRange)) {
		return fmt.Errorf("GET /v1/messages?offset=%d below the log start: %d %s, want 416 OFFSET_OUT_OF_RANGE", offset, resp.StatusCode, body)
	}
	return nil
}
