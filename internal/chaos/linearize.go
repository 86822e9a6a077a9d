package chaos

import (
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"orderlog/internal/history"
)

// The sequential model the history is checked against, independently of
// internal/history: a log whose append(value) returns the offset the value
// got, and whose read(from, next) returns the messages in [from, next).
// Offsets grow (holes allowed). A read does not seal its range in the
// model (that made the search explode on hole-only pages); that an
// offset's content never changes is internal/history.CheckPages' part.

type appendInput struct{ value string }
type appendOutput struct{ offset uint64 }
type readInput struct{ from, next uint64 }
type readOutput struct{ messages []logEntry }

// logEntry is one appended message; entries form an immutable list,
// newest first, so a step never copies the log.
type logEntry struct {
	offset uint64
	value  string
	prev   *logEntry
	count  int
	hash   uint64
}

// logState is the model's state: the newest entry.
type logState struct {
	newest *logEntry
}

func (s logState) append(offset uint64, value string) logState {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d:%d:%s", s.hashOf(), offset, value)
	return logState{newest: &logEntry{offset: offset, value: value, prev: s.newest, count: s.count() + 1, hash: h.Sum64()}}
}

func (s logState) count() int {
	if s.newest == nil {
		return 0
	}
	return s.newest.count
}

func (s logState) hashOf() uint64 {
	if s.newest == nil {
		return 0
	}
	return s.newest.hash
}

// between lists the entries in [from, next), oldest first.
func (s logState) between(from, next uint64) []logEntry {
	var out []logEntry
	for e := s.newest; e != nil && e.offset >= from; e = e.prev {
		if e.offset < next {
			out = append(out, logEntry{offset: e.offset, value: e.value})
		}
	}
	slices.Reverse(out)
	return out
}

var logModel = porcupine.Model{
	Init: func() any { return logState{} },
	Step: func(state, input, output any) (bool, any) {
		s := state.(logState)
		switch in := input.(type) {
		case appendInput:
			offset := output.(appendOutput).offset
			if s.newest != nil && offset <= s.newest.offset {
				return false, s
			}
			return true, s.append(offset, in.value)
		case readInput:
			got := output.(readOutput).messages
			if !slices.Equal(s.between(in.from, in.next), got) {
				return false, s
			}
			return true, s
		}
		return false, s
	},
	Equal: func(a, b any) bool {
		x, y := a.(logState), b.(logState)
		return x.count() == y.count() && x.hashOf() == y.hashOf()
	},
	Hash: func(state any) uint64 {
		return state.(logState).hashOf()
	},
	DescribeOperation: func(input, output any) string {
		switch in := input.(type) {
		case appendInput:
			return fmt.Sprintf("append(%s) -> %d", in.value, output.(appendOutput).offset)
		case readInput:
			return fmt.Sprintf("read[%d, %d) -> %d messages", in.from, in.next, len(output.(readOutput).messages))
		}
		return "?"
	},
}

// TimedRead is a full read with the times it was asked for and answered.
type TimedRead struct {
	Read              history.Read
	Started, Finished time.Time
}

// Linearizable checks the appends (acknowledged ones, and unacknowledged
// ones a read shows logged, which may take effect any time after they were
// sent), the tailed pages and the full reads against the log model. It
// returns porcupine's verdict (Ok, Illegal, or Unknown on timeout) and the
// number of operations checked.
func Linearizable(ops []history.Op, pages []history.Page, reads []TimedRead, timeout time.Duration) (porcupine.CheckResult, int) {
	var origin time.Time
	for _, op := range ops {
		if origin.IsZero() || op.Sent.Before(origin) {
			origin = op.Sent
		}
	}
	at := func(t time.Time) int64 { return int64(t.Sub(origin)) }
	logged := make(map[string]uint64)
	for _, r := range reads {
		for _, m := range r.Read.Messages {
			logged[value(m.Producer, m.Seq)] = m.Offset
		}
	}
	var history []porcupine.Operation
	clients := make(map[string]int)
	clientID := func(name string) int {
		if _, ok := clients[name]; !ok {
			clients[name] = len(clients)
		}
		return clients[name]
	}
	for _, op := range ops {
		v := value(op.Producer, op.Seq)
		o := porcupine.Operation{ClientId: clientID(op.Producer), Input: appendInput{v}, Call: at(op.Sent)}
		switch offset, inLog := logged[v]; {
		case !op.Acked.IsZero():
			o.Output, o.Return = appendOutput{op.Offset}, at(op.Acked)
		case inLog:
			o.Output, o.Return = appendOutput{offset}, math.MaxInt64
		default:
			continue // never acknowledged, never logged: it had no effect
		}
		history = append(history, o)
	}
	for _, p := range coalesce(pages, 500*time.Millisecond) {
		if p.Next > p.From {
			history = append(history, readOp(clientID("tail "+p.Reader), p.From, p.Next, p.Messages, at(p.Started), at(p.Received)))
		}
	}
	for i, r := range reads {
		history = append(history, readOp(clientID(fmt.Sprintf("full read %d", i)), 0, r.Read.Committed, r.Read.Messages, at(r.Started), at(r.Finished)))
	}
	return porcupine.CheckOperationsTimeout(logModel, history, timeout), len(history)
}

func readOp(client int, from, next uint64, messages []history.Logged, call, ret int64) porcupine.Operation {
	out := make([]logEntry, len(messages))
	for i, m := range messages {
		out[i] = logEntry{offset: m.Offset, value: value(m.Producer, m.Seq)}
	}
	return porcupine.Operation{ClientId: client, Input: readInput{from, next}, Call: call, Output: readOutput{out}, Return: ret}
}

// coalesce merges each reader's consecutive pages received within window
// of the first into one read (a page may have been computed any time after
// its tail began, so a merged read keeps the tail's start as its call and
// the last page's arrival as its return). Fewer, larger reads keep the
// search tractable; internal/history's CheckPages checks every page.
func coalesce(pages []history.Page, window time.Duration) []history.Page {
	var out []history.Page
	open := make(map[string]int) // reader -> index in out
	for _, p := range pages {
		i, ok := open[p.Reader]
		if ok && out[i].Next == p.From && p.Received.Sub(out[i].Received) < window {
			merged := &out[i]
			merged.Next, merged.Received = p.Next, p.Received
			merged.Messages = append(merged.Messages, p.Messages...)
			continue
		}
		p.Messages = slices.Clone(p.Messages)
		out = append(out, p)
		open[p.Reader] = len(out) - 1
	}
	return out
}
