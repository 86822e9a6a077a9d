package node

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// The quota test's load: the abuser sends 64 KiB frames on abuseStreams
// streams as fast as it can, the good principal 1 KiB frames one at a
// time, timing each ack. An attempt is quotaRounds rounds of goodFrames
// alone, 2*goodFrames with the abuser, goodFrames alone again; up to
// quotaAttempts attempts.
const (
	abuseQuota    = 100_000 // bytes/s
	abuseFrame    = 64 << 10
	abuseStreams  = 4
	abuseWindow   = 8   // unanswered frames per abuser stream
	goodFrames    = 250 // per phase alone; twice as many with the abuser
	quotaRounds   = 4
	quotaAttempts = 3
	maxP99Ratio   = 2.0
	abuseNoQuotaV = "ORDERLOG_ABUSE_NO_QUOTA" // set: the abuser has no quota (a control run, by hand)
)

// TestAPrincipalOverItsQuotaLeavesOthersP99: while a principal sends
// frames as fast as it can, ignoring every retry-after, its frames are
// refused with QUOTA_EXCEEDED (gRPC RESOURCE_EXHAUSTED) and a retry-after,
// it logs no more than its quota, and another principal's produce p99
// stays within 2x of its p99 without the abuser.
//
// The two are measured on the same node in alternating phases (alone,
// with the abuser, alone), so that what else the machine does falls on
// both alike, over 2,000 frames each. The abuser is measured against once
// each of its streams has had an answer: what it costs is its steady
// state, not the start of its streams (which, started every 100 frames,
// decided the p99 on a quiet machine). On two shared cores a stall of the
// whole machine can still land on the abuser's phases and decide a p99:
// the comparison is made again, up to quotaAttempts times, and fails
// only if every attempt is over 2x. Without the quota
// (ORDERLOG_ABUSE_NO_QUOTA=1) every attempt is.
func TestAPrincipalOverItsQuotaLeavesOthersP99(t *testing.T) {
	if testing.Short() {
		t.Skip("rounds of timed produce load")
	}
	n := startAbuseNode(t, Config{}, "abuser", "good")
	if os.Getenv(abuseNoQuotaV) == "" {
		if _, err := orderlogpb.NewAuthClient(n.conn).SetQuota(as(n.ctx, n.root),
			&orderlogpb.Quota{Principal: "abuser", ProduceBytesPerSec: abuseQuota}); err != nil {
			t.Fatal(err)
		}
		big := &orderlogpb.ProduceRequest{Messages: []*orderlogpb.Message{{Topic: "abuse", Value: make([]byte, abuseFrame)}}}
		waitFor(t, 10*time.Second, "the quota to apply", func() bool {
			return produceOne(n.as("abuser"), t, n.conn, big) == apierr.QuotaExceeded
		})
	}
	good := newTimedProducer(t, n)
	good.measure(t, goodFrames)                            // warm: the topic, the stream, the first ledger
	load := abuseLoad{conn: dialFrom(t, n.s, "127.0.0.2")} // a client of its own, as another principal's would be
	begin := time.Now()
	within := false
	for attempt := 1; attempt <= quotaAttempts && !within; attempt++ {
		var alone, abused []time.Duration
		for range quotaRounds {
			alone = append(alone, good.measure(t, goodFrames)...)
			stop := load.start(t, n)
			abused = append(abused, good.measure(t, 2*goodFrames)...)
			stop()
			alone = append(alone, good.measure(t, goodFrames)...)
		}
		p99Alone, p99Abused := p99(alone), p99(abused)
		ratio := float64(p99Abused) / float64(p99Alone)
		within = ratio <= maxP99Ratio
		t.Logf("attempt %d: the good principal's produce p99 over %d frames: alone %v, with the abuser %v: %.2fx (p50 %v, %v)",
			attempt, len(alone), p99Alone, p99Abused, ratio, median(alone), median(abused))
	}
	t.Logf("abuser: %d frames sent, %d refused with QUOTA_EXCEEDED, %d bytes logged in %v of load",
		load.sent.Load(), load.refused.Load(), load.loggedBytes.Load(), load.elapsed)
	if !within {
		t.Errorf("the good principal's p99 with the abuser was over %.0fx its p99 alone in %d attempts", maxP99Ratio, quotaAttempts)
	}
	if os.Getenv(abuseNoQuotaV) != "" {
		return
	}
	// Each of the abuser's streams is held back a second per refusal, so
	// in steady state it has abuseStreams refusals a second against the
	// quota's ~1.5 frames logged; a phase that starts with a full bucket
	// logs more and refuses less. Only "more refused than logged" holds
	// with a margin on a loaded machine; the bytes bound below is the
	// quota's guarantee.
	if logged := load.loggedBytes.Load() / abuseFrame; load.refused.Load() < logged {
		t.Errorf("the abuser had %d frames refused and %d logged", load.refused.Load(), logged)
	}
	// a full bucket is a second's worth, and the frame that empties it
	// goes into debt
	if allowed := int64(abuseQuota*(time.Since(begin).Seconds()+1)) + abuseFrame; load.loggedBytes.Load() > allowed {
		t.Errorf("the abuser logged %d bytes in %v under a quota of %d B/s", load.loggedBytes.Load(), time.Since(begin), abuseQuota)
	}
	if msg := load.refusal.Load(); msg == nil || !strings.Contains(*msg, "retry in") {
		t.Errorf("a refusal's message says no retry-after: %v", msg)
	}
}

// timedProducer sends frames on one Produce stream, one at a time.
type timedProducer struct {
	stream orderlogpb.Producer_ProduceClient
	frame  *orderlogpb.ProduceRequest
}

func newTimedProducer(t *testing.T, n *abuseNode) *timedProducer {
	stream, err := orderlogpb.NewProducerClient(n.conn).Produce(n.as("good"))
	if err != nil {
		t.Fatal(err)
	}
	return &timedProducer{stream: stream,
		frame: &orderlogpb.ProduceRequest{Messages: []*orderlogpb.Message{{Topic: "good", Value: make([]byte, 1024)}}}}
}

// measure sends frames one by one and returns how long each took to be
// acknowledged.
func (p *timedProducer) measure(t *testing.T, frames int) []time.Duration {
	t.Helper()
	took := make([]time.Duration, frames)
	for i := range took {
		begin := time.Now()
		if err := p.stream.Send(p.frame); err != nil {
			t.Fatal(err)
		}
		resp, err := p.stream.Recv()
		if err != nil || resp.ErrorCode != "" {
			t.Fatalf("the good principal's frame: %v %v", err, resp)
		}
		took[i] = time.Since(begin)
	}
	return took
}

// abuseLoad is the abuser: abuseStreams streams, each sending its frames
// as fast as it may have abuseWindow of them unanswered, whatever they
// are answered: it ignores every retry-after.
type abuseLoad struct {
	conn                       *grpc.ClientConn
	sent, refused, loggedBytes atomic.Int64
	answered                   atomic.Int64
	refusal                    atomic.Pointer[string]
	elapsed                    time.Duration
}

// start runs the load until the returned function is called.
func (l *abuseLoad) start(t *testing.T, n *abuseNode) (stop func()) {
	ctx, cancel := context.WithCancel(n.as("abuser"))
	begin := time.Now()
	var wg sync.WaitGroup
	var streamsAnswered atomic.Int64 // the streams of this start with an answer
	frame := &orderlogpb.ProduceRequest{Messages: []*orderlogpb.Message{{Topic: "abuse", Value: make([]byte, abuseFrame)}}}
	for range abuseStreams {
		stream, err := orderlogpb.NewProducerClient(l.conn).Produce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		window := make(chan struct{}, abuseWindow)
		wg.Go(func() { // answers
			for first := true; ; first = false {
				resp, err := stream.Recv()
				if err != nil {
					return
				}
				<-window
				l.answered.Add(1)
				if first {
					streamsAnswered.Add(1)
				}
				switch resp.ErrorCode {
				case string(apierr.QuotaExceeded):
					l.refused.Add(1)
					msg := resp.ErrorMessage
					l.refusal.Store(&msg)
				case "":
					l.loggedBytes.Add(abuseFrame)
				}
			}
		})
		wg.Go(func() { // frames
			for {
				select {
				case <-ctx.Done():
					return
				case window <- struct{}{}:
				}
				if stream.Send(frame) != nil {
					return
				}
				l.sent.Add(1)
			}
		})
	}
	waitFor(t, 10*time.Second, "an answer on each of the abuser's streams", func() bool {
		return streamsAnswered.Load() == abuseStreams
	})
	return func() {
		cancel()
		wg.Wait()
		l.elapsed += time.Since(begin)
	}
}

func median(d []time.Duration) time.Duration { return quantile(d, 0.5) }
func p99(d []time.Duration) time.Duration    { return quantile(d, 0.99) }

func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}
