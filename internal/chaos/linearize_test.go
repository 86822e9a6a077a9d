package chaos

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"orderlog/internal/history"
)

var base = time.Unix(1000, 0)

func ms(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }

// synthetic builds a history of a correct log: producers with many
// messages in flight, offsets handed out in commit order, some holes,
// some messages logged but never acknowledged, some never logged, two
// tailing readers whose pages all count from the tail's start, and three
// full reads at the end.
func synthetic(seed uint64, messages int) ([]history.Op, []history.Page, []TimedRead) {
	rng := rand.New(rand.NewPCG(seed, 1))
	type commit struct {
		at     int // µs
		logged history.Logged
		hole   bool
	}
	var ops []history.Op
	var log []commit
	now := 0
	var offset uint64
	producers := []string{"g0", "g1", "g2", "h0", "k0"}
	seqs := map[string]uint64{}
	for range messages {
		now += rng.IntN(400)
		p := producers[rng.IntN(len(producers))]
		seq := seqs[p]
		seqs[p]++
		op := history.Op{Producer: p, Seq: seq, Sent: base.Add(time.Duration(now) * time.Microsecond)}
		switch r := rng.IntN(100); {
		case r < 2: // never logged
		default:
			if rng.IntN(20) == 0 {
				log = append(log, commit{at: now + 1, hole: true})
				offset++
			}
			committed := now + 1 + rng.IntN(50)
			log = append(log, commit{at: committed, logged: history.Logged{Offset: offset, Producer: p, Seq: seq}})
			if r >= 4 { // 2% logged but never acknowledged
				op.Acked, op.Offset = base.Add(time.Duration(committed+rng.IntN(20000))*time.Microsecond), offset
			}
			offset++
		}
		ops = append(ops, op)
	}
	end := now + 100000
	committedBy := func(at int) (uint64, []history.Logged) {
		var c uint64
		var out []history.Logged
		for _, e := range log {
			if e.at > at {
				break
			}
			c++
			if !e.hole {
				out = append(out, e.logged)
			}
		}
		return c, out
	}
	var pages []history.Page
	for _, reader := range []string{"t0", "t1"} {
		var from uint64
		for at := rng.IntN(5000); at < end; at += 1000 + rng.IntN(20000) {
			c, logged := committedBy(at)
			if c <= from {
				continue
			}
			page := history.Page{Reader: reader, From: from, Next: c, Started: base, Received: base.Add(time.Duration(at+rng.IntN(2000)) * time.Microsecond)}
			for _, m := range logged {
				if m.Offset >= from {
					page.Messages = append(page.Messages, m)
				}
			}
			pages = append(pages, page)
			from = c
		}
	}
	c, logged := committedBy(end)
	var holes [][2]uint64
	for i, e := range log {
		if e.hole {
			holes = append(holes, [2]uint64{uint64(i), uint64(i) + 1})
		}
	}
	var reads []TimedRead
	for i := range 3 {
		at := base.Add(time.Duration(end+i*1000) * time.Microsecond)
		reads = append(reads, TimedRead{Read: history.Read{Messages: logged, Holes: holes, Committed: c}, Started: at, Finished: at.Add(500 * time.Microsecond)})
	}
	return ops, pages, reads
}

func lg(offset uint64, producer string, seq uint64) history.Logged {
	return history.Logged{Offset: offset, Producer: producer, Seq: seq}
}

func TestLinearizableSmall(t *testing.T) {
	ops := []history.Op{
		{Producer: "a", Seq: 0, Sent: ms(0), Acked: ms(5), Offset: 0},
		{Producer: "b", Seq: 0, Sent: ms(1), Acked: ms(6), Offset: 2}, // offset 1 is a hole
		{Producer: "a", Seq: 1, Sent: ms(7), Acked: ms(9), Offset: 3},
		{Producer: "b", Seq: 1, Sent: ms(8)}, // never acknowledged, logged
		{Producer: "c", Seq: 0, Sent: ms(8)}, // never acknowledged, never logged
	}
	full := history.Read{Messages: []history.Logged{lg(0, "a", 0), lg(2, "b", 0), lg(3, "a", 1), lg(4, "b", 1)}, Committed: 5}
	pages := []history.Page{
		{Reader: "t", From: 0, Next: 3, Messages: []history.Logged{lg(0, "a", 0), lg(2, "b", 0)}, Started: ms(0), Received: ms(7)},
		{Reader: "t", From: 3, Next: 5, Messages: []history.Logged{lg(3, "a", 1), lg(4, "b", 1)}, Started: ms(0), Received: ms(12)},
	}
	reads := []TimedRead{{Read: full, Started: ms(20), Finished: ms(21)}}
	check := func(name string, ops []history.Op, pages []history.Page, reads []TimedRead, want porcupine.CheckResult) {
		t.Helper()
		started := time.Now()
		got, _ := Linearizable(ops, pages, reads, 10*time.Second)
		if got != want {
			t.Errorf("%s: %s, want %s", name, verdict(got), verdict(want))
		}
		if d := time.Since(started); d > 500*time.Millisecond {
			t.Errorf("%s: took %s", name, d)
		}
	}
	check("valid", ops, pages, reads, porcupine.Ok)

	// a/1 acknowledged at 9, then d/0 sent at 10 gets the lower offset 1
	// (where the valid history has a hole): contract 1 broken.
	late := append(append([]history.Op(nil), ops...), history.Op{Producer: "d", Seq: 0, Sent: ms(10), Acked: ms(11), Offset: 1})
	lateRead := history.Read{Messages: []history.Logged{lg(0, "a", 0), lg(1, "d", 0), lg(2, "b", 0), lg(3, "a", 1), lg(4, "b", 1)}, Committed: 5}
	check("real-time order", late, nil, []TimedRead{{Read: lateRead, Started: ms(20), Finished: ms(21)}}, porcupine.Illegal)

	// A page received at 7 shows a/1, which was only sent at 7.5.
	early := append([]history.Op(nil), ops...)
	early[2].Sent = ms(7).Add(500 * time.Microsecond)
	earlyPages := []history.Page{{Reader: "t", From: 0, Next: 4, Messages: []history.Logged{lg(0, "a", 0), lg(2, "b", 0), lg(3, "a", 1)}, Started: ms(0), Received: ms(7)}}
	check("read before append", early, earlyPages, reads, porcupine.Illegal)

	// A page shows offset 2 but not offset 0 below it, after 0 was acknowledged.
	gap := []history.Page{{Reader: "t", From: 0, Next: 3, Messages: []history.Logged{lg(2, "b", 0)}, Started: ms(6), Received: ms(7)}}
	check("read skips an acknowledged offset", ops, gap, reads, porcupine.Illegal)

	// Acknowledged at an offset the log does not hold it at.
	moved := append([]history.Op(nil), ops...)
	moved[1].Offset = 1
	check("acknowledged offset moved", moved, pages, reads, porcupine.Illegal)
}

// TestLinearizableLarge checks histories of the chaos run's size and
// shape (thousands of appends, tail pages whose call is the tail's start)
// in well under the chaos run's budget.
func TestLinearizableLarge(t *testing.T) {
	for seed := range uint64(3) {
		ops, pages, reads := synthetic(seed, 5000)
		started := time.Now()
		got, n := Linearizable(ops, pages, reads, 30*time.Second)
		t.Logf("seed %d: %s over %d operations in %s", seed, verdict(got), n, time.Since(started).Round(time.Millisecond))
		if got != porcupine.Ok {
			t.Fatalf("seed %d: a correct history is %s", seed, verdict(got))
		}
		// Break contract 1: the first acknowledged message and one
		// sent long after its ack swap offsets, in the acks and in the
		// full reads alike (the pages, which would also contradict the
		// swap, are left out).
		bad := append([]history.Op(nil), ops...)
		a, b := -1, -1
		for i, op := range bad {
			if op.Acked.IsZero() {
				continue
			}
			if a < 0 {
				a = i
			} else if op.Producer != bad[a].Producer && op.Sent.After(bad[a].Acked.Add(50*time.Millisecond)) {
				b = i
				break
			}
		}
		bad[a].Offset, bad[b].Offset = bad[b].Offset, bad[a].Offset
		var swapped []TimedRead
		for _, r := range reads {
			messages := append([]history.Logged(nil), r.Read.Messages...)
			for i, m := range messages {
				switch m.Offset {
				case bad[a].Offset:
					messages[i].Producer, messages[i].Seq = bad[a].Producer, bad[a].Seq
				case bad[b].Offset:
					messages[i].Producer, messages[i].Seq = bad[b].Producer, bad[b].Seq
				}
			}
			r.Read.Messages = messages
			swapped = append(swapped, r)
		}
		if _, errs := history.Check(bad, swapped[0].Read); !slices.ContainsFunc(errs, func(err error) bool {
			return strings.Contains(err.Error(), "acknowledged before")
		}) {
			t.Fatalf("seed %d: the swap should break real-time order: %v", seed, errs)
		}
		started = time.Now()
		got, _ = Linearizable(bad, nil, swapped, 30*time.Second)
		t.Logf("seed %d, real-time order broken: %s in %s", seed, verdict(got), time.Since(started).Round(time.Millisecond))
		if got != porcupine.Illegal {
			t.Fatalf("seed %d: a history breaking real-time order is %s", seed, verdict(got))
		}
		if got, _ := Linearizable(ops, nil, reads, 30*time.Second); got != porcupine.Ok {
			t.Fatalf("seed %d: the same history without the swap is %s", seed, verdict(got))
		}
	}
}
