package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
	pb "orderlog/proto/sequencerpb"
)

// follower follows the sequencer's commit-map stream as a reader does
// and remembers when each new watermark C arrived, and what the stream
// carried.
type follower struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     struct {
		sync.Mutex
		watermarks []watermark // C increasing
		bytes      int64       // protobuf bytes of the frames received
		frames     int64       // one per commit entry
		records    int64
		logBytes   int64 // the records as the commit log encodes them
		err        error
	}
}

type watermark struct {
	at time.Time
	c  uint64
}

// follow subscribes to the commit map from offset 0 (the cluster is
// fresh: the leader retains every record).
func follow(sequencerGRPC string) (*follower, error) {
	conn, err := grpc.NewClient(sequencerGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := pb.NewSequencerClient(conn).CommitMap(ctx, &pb.CommitMapRequest{})
	if err != nil {
		cancel()
		conn.Close()
		return nil, err
	}
	f := &follower{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		defer conn.Close()
		for {
			frame, err := stream.Recv()
			if err != nil {
				f.mu.Lock()
				f.mu.err = err
				f.mu.Unlock()
				return
			}
			f.apply(frame, time.Now())
		}
	}()
	return f, nil
}

func (f *follower) apply(frame *pb.CommitMapFrame, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.bytes += int64(proto.Size(frame))
	f.mu.frames++
	f.mu.records += int64(len(frame.Records))
	for _, r := range frame.Records {
		f.mu.logBytes += int64(encodedSize(r))
		if r.Kind != pb.RecordKind_WATERMARK {
			continue
		}
		if n := len(f.mu.watermarks); n == 0 || r.Watermark > f.mu.watermarks[n-1].c {
			f.mu.watermarks = append(f.mu.watermarks, watermark{at, r.Watermark})
		}
	}
}

// counters are the stream's bytes, frames and records so far, and the
// records' size in the commit log.
func (f *follower) counters() (bytes, frames, records, logBytes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.bytes, f.mu.frames, f.mu.records, f.mu.logBytes
}

// framesSoFar is how many frames the stream has carried.
func (f *follower) framesSoFar() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.frames
}

// encodedSize is a record's size in a commit-log entry
// (docs/format/commit-log.md §2): a kind byte and uvarints. Entry headers
// (10-12 bytes per group of records) and the WAL's framing are not in it.
func encodedSize(r *pb.CommitRecord) int {
	switch r.Kind {
	case pb.RecordKind_WRITTEN:
		return 1 + uvarintLen(r.Range.First) + uvarintLen(r.Range.End-r.Range.First) + uvarintLen(r.LedgerId) + uvarintLen(uint64(r.EntryId))
	case pb.RecordKind_HOLE:
		return 1 + uvarintLen(r.Range.First) + uvarintLen(r.Range.End-r.Range.First)
	default:
		return 1 + uvarintLen(r.Watermark)
	}
}

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// committedAt is when a watermark above offset first arrived.
func (f *follower) committedAt(offset uint64) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.mu.watermarks
	i := sort.Search(len(w), func(i int) bool { return w[i].c > offset })
	if i == len(w) {
		return time.Time{}, false
	}
	return w[i].at, true
}

func (f *follower) stop() {
	f.cancel()
	<-f.done
}

// probe sends one 1 KiB message every interval through one ingest node
// and remembers when each was acknowledged and at which offset. Set
// beside the load, its messages see what the load's see: the ack at the
// ledger's LAC, then C passing the offset once the commit record holding
// it is confirmed.
type probe struct {
	done chan struct{}
	acks []probeAck
	err  error
}

type probeAck struct {
	at     time.Time
	offset uint64
}

func startProbe(ctx context.Context, c *client.Client, name string, interval time.Duration) (*probe, error) {
	producer, err := c.NewProducer(ctx, name, client.ProducerOptions{MaxInFlight: 1})
	if err != nil {
		return nil, fmt.Errorf("probe producer: %w", err)
	}
	p := &probe{done: make(chan struct{})}
	value := make([]byte, 1024)
	go func() {
		defer close(p.done)
		defer producer.Close()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			pending, err := producer.Send(ctx, &orderlogpb.Message{Topic: "probe", Value: value})
			if err == nil {
				var acks []*orderlogpb.Ack
				acks, err = pending.Wait(ctx)
				if err == nil && len(acks) == 1 {
					p.acks = append(p.acks, probeAck{time.Now(), acks[0].Offset})
				}
			}
			if err != nil && ctx.Err() == nil {
				p.err = err
				return
			}
		}
	}()
	return p, nil
}

// highestAcked is the highest offset a probe had acknowledged before to
// (false if none had).
func highestAcked(probes []*probe, to time.Time) (uint64, bool) {
	var highest uint64
	var any bool
	for _, p := range probes {
		for _, a := range p.acks {
			if a.at.Before(to) && (!any || a.offset > highest) {
				highest, any = a.offset, true
			}
		}
	}
	return highest, any
}

// waitPassed waits until C passes offset, at most wait (or until ctx ends
// or the stream does), and returns when it stopped waiting.
func (f *follower) waitPassed(ctx context.Context, offset uint64, wait time.Duration) time.Time {
	deadline := time.Now().Add(wait)
	for {
		if _, ok := f.committedAt(offset); ok {
			return time.Now()
		}
		if !time.Now().Before(deadline) {
			return time.Now()
		}
		select {
		case <-ctx.Done():
			return time.Now()
		case <-f.done:
			return time.Now()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// lagStats are the C lags of a phase's probes: for each probe message
// acknowledged in [from, to), how long after its ack the commit map's C
// passed its offset (zero if C was there first: the two arrive over
// different connections). A probe C had not passed when the wait after
// the load ended is counted in unpassed, not among the lags: its lag is
// at least bound (the wait's end minus to). A percentile that falls among
// the unpassed probes is bound, marked over.
type lagStats struct {
	passed, unpassed int
	p50, p99         time.Duration
	p50Over, p99Over bool
	bound            time.Duration
}

func commitLags(f *follower, probes []*probe, from, to, waited time.Time) lagStats {
	var lags []time.Duration
	s := lagStats{bound: waited.Sub(to)}
	for _, p := range probes {
		for _, a := range p.acks {
			if a.at.Before(from) || !a.at.Before(to) {
				continue
			}
			at, ok := f.committedAt(a.offset)
			if !ok {
				s.unpassed++
				continue
			}
			lags = append(lags, max(0, at.Sub(a.at)))
		}
	}
	s.passed = len(lags)
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	s.p50, s.p50Over = s.percentile(lags, 0.5)
	s.p99, s.p99Over = s.percentile(lags, 0.99)
	return s
}

// percentile is the p-quantile (0..1) of the sorted passed lags with the
// unpassed probes above them all; zero for none.
func (s lagStats) percentile(sorted []time.Duration, p float64) (time.Duration, bool) {
	total := len(sorted) + s.unpassed
	if total == 0 {
		return 0, false
	}
	i := int(p * float64(total-1))
	if i >= len(sorted) {
		return s.bound, true
	}
	return sorted[i], false
}

// probes says how many probes C passed, and how many it had not when the
// wait ended.
func (s lagStats) probes() string {
	if s.unpassed == 0 {
		return fmt.Sprintf("%d probes, C passed all", s.passed)
	}
	return fmt.Sprintf("%d probes passed, %d not %.1f s after the load", s.passed, s.unpassed, s.bound.Seconds())
}

// formatLag prints a lag in ms, as ">x ms" when it is a lower bound.
func formatLag(d time.Duration, over bool) string {
	if over {
		return fmt.Sprintf(">%.0fms", millis(d))
	}
	return fmt.Sprintf("%.2fms", millis(d))
}

// percentile is the p-quantile (0..1) of ds; zero for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(p*float64(len(s)-1))]
}
