package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"orderlog/proto/walpb"
)

// stallRule makes a store's ReadEntries streams stall like a paused node's:
// the stream stays open and sends the entries before silentFrom, then
// nothing more and no error, until the reader gives up on the stream.
type stallRule struct {
	mu struct {
		sync.Mutex
		silentFrom int64 // first entry never sent; -1: no stall
		stalled    int   // streams that stalled
	}
}

func newStallRule() *stallRule {
	r := &stallRule{}
	r.mu.silentFrom = -1
	return r
}

func (r *stallRule) set(silentFrom int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.silentFrom = silentFrom
}

func (r *stallRule) stalledStreams() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.stalled
}

// stallingBackend serves a real WAL store through a stallingWAL.
type stallingBackend struct {
	storeBackend
	rule *stallRule
}

func (b stallingBackend) server() walpb.WALServer {
	return stallingWAL{WALServer: b.storeBackend.server(), rule: b.rule}
}

func openStalling(open openBackend, rule *stallRule) openBackend {
	return func(t testing.TB, dir string) storeBackend {
		return stallingBackend{storeBackend: open(t, dir), rule: rule}
	}
}

// stallingWAL is the store's own gRPC service, except that ReadEntries
// streams follow its rule.
type stallingWAL struct {
	walpb.WALServer
	rule *stallRule
}

func (s stallingWAL) ReadEntries(req *walpb.ReadEntriesRequest, stream grpc.ServerStreamingServer[walpb.ReadEntryResponse]) error {
	s.rule.mu.Lock()
	silentFrom := s.rule.mu.silentFrom
	s.rule.mu.Unlock()
	if silentFrom < 0 {
		return s.WALServer.ReadEntries(req, stream)
	}
	if err := stream.SendHeader(nil); err != nil { // the stream is answered
		return err
	}
	return s.WALServer.ReadEntries(req, &stallingStream{ServerStreamingServer: stream, rule: s.rule, silentFrom: silentFrom})
}

// stallingStream sends the entries before silentFrom; a Send of a later
// one blocks until the stream ends (the reader cancels it, or the server
// stops).
type stallingStream struct {
	grpc.ServerStreamingServer[walpb.ReadEntryResponse]
	rule       *stallRule
	silentFrom int64
}

func (s *stallingStream) Send(resp *walpb.ReadEntryResponse) error {
	if resp.EntryId < s.silentFrom {
		return s.ServerStreamingServer.Send(resp)
	}
	s.rule.mu.Lock()
	s.rule.mu.stalled++
	s.rule.mu.Unlock()
	<-s.Context().Done()
	return s.Context().Err()
}

// TestScanMovesOnFromSilentStores reads a closed ledger whose stores are
// real WAL stores over gRPC, some of which answer the read stream and then
// send nothing more, neither entries nor errors (a paused node keeps its
// connections open). The scan must read on from the next member at the
// entry it has reached and finish long before the test's bound on a hang,
// with every entry once, in order and byte-identical.
func TestScanMovesOnFromSilentStores(t *testing.T) {
	c := &testCluster{cli: startEtcd(t), epoch: 3, writer: "ingest-1"}
	setEpochAndWriter(t, c.cli, c.epoch, c.writer)
	open := testBackend(t)
	rules := []*stallRule{newStallRule(), newStallRule(), newStallRule()}
	for i, rule := range rules {
		c.slots = append(c.slots, newSlot(t, fmt.Sprintf("slot-%d", i), openStalling(open, rule)))
	}
	c.net = newFaultNet(41, c.slots)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := c.create(t, 2, 1, WriterOptions{})
	const entries = 30
	appendRange(t, w, 0, entries)
	for i := range c.slots {
		waitHolds(ctx, t, c, i, w.Metadata(), entries-1)
	}
	m, err := closeConfirmed(ctx, w, entries-1)
	if err != nil {
		t.Fatal(err)
	}

	// silentFrom[i] is the entry at which slot i falls silent (-1: it
	// never does). The reader starts at slot 0.
	cases := map[string][]int64{
		"first_store_silent_from_the_start": {0, -1, -1},
		"two_stores_silent_midway":          {10, 20, -1},
		"silent_then_silent_from_the_start": {5, 0, -1},
	}
	for name, silentFrom := range cases {
		t.Run(name, func(t *testing.T) {
			for i, rule := range rules {
				rule.set(silentFrom[i])
			}
			before := stalled(rules)
			// Bounds a hang only: the stalled streams end when the reader
			// cancels them, or when this context ends.
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			r, err := NewReader(m, m.LastEntry, ReaderOptions{Stores: c.net.dialer("reader")})
			if err != nil {
				t.Fatal(err)
			}
			var got []Entry
			err = r.Scan(ctx, 0, m.LastEntry, func(e Entry) error {
				got = append(got, e)
				return nil
			})
			if err != nil {
				t.Fatalf("scan with silent stores: %v", err)
			}
			if len(got) != entries {
				t.Fatalf("scan gave %d entries, want %d", len(got), entries)
			}
			for k, e := range got {
				if e.ID != int64(k) || !bytes.Equal(e.Payload, payloadFor(m.ID, int64(k))) || e.Span != spanFor(int64(k)) {
					t.Fatalf("entry %d: got id %d payload %q span %v", k, e.ID, e.Payload, e.Span)
				}
			}
			wantStalls := 0
			for _, from := range silentFrom {
				if from >= 0 {
					wantStalls++
				}
			}
			if n := stalled(rules) - before; n < wantStalls {
				t.Fatalf("%d streams stalled, want at least %d: the test did not exercise the silence", n, wantStalls)
			}
		})
	}
	t.Run("silent_store_remembered_across_readers", func(t *testing.T) {
		// A second reader sharing SilentStores starts with another member:
		// a paused store first in many ensembles costs one Silence, not
		// one per ledger (a new sequencer leader replays every commit
		// ledger of the list).
		rules[0].set(0)
		rules[1].set(-1)
		rules[2].set(-1)
		var silent SilentStores
		for round := range 2 {
			before := stalled(rules)
			r, err := NewReader(m, m.LastEntry, ReaderOptions{Stores: c.net.dialer("reader"), Silent: &silent})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			if err := r.Scan(ctx, 0, m.LastEntry, func(Entry) error { n++; return nil }); err != nil || n != entries {
				t.Fatalf("round %d: %d entries, %v", round, n, err)
			}
			stalls := stalled(rules) - before
			if round == 0 && stalls == 0 || round == 1 && stalls != 0 {
				t.Fatalf("round %d: %d stalled streams, want 1 then 0", round, stalls)
			}
		}
	})
	t.Run("every_store_silent", func(t *testing.T) {
		for _, rule := range rules {
			rule.set(3)
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		r, err := NewReader(m, m.LastEntry, ReaderOptions{Stores: c.net.dialer("reader"), Silence: 50 * time.Millisecond, Passes: 2})
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		err = r.Scan(ctx, 0, m.LastEntry, func(e Entry) error {
			got = append(got, e.ID)
			return nil
		})
		if !errors.Is(err, ErrUnreadable) || ctx.Err() != nil {
			t.Fatalf("scan with every store silent: %v (context: %v), want ErrUnreadable", err, ctx.Err())
		}
		if len(got) != 3 || got[0] != 0 || got[2] != 2 {
			t.Fatalf("scan gave entries %v before failing, want 0..2 once", got)
		}
	})
}

func stalled(rules []*stallRule) int {
	n := 0
	for _, r := range rules {
		n += r.stalledStreams()
	}
	return n
}
