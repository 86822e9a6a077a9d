package chaos

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"orderlog/internal/history"
)

// The sequential model the history is checked against, independently of
// internal/history: a log whose append(value) returns the offset the value
// got, and whose read(from, next) returns the messages in [from, next).
// Offsets grow; offsets never appended are holes.
//
// The search is kept tractable by giving the model the log's final order:
// the messages of a full read of [0, C), every one of which some operation
// in the history must have appended (that read is itself an operation of
// the history, so it had to see them all, in offset order). The model's
// state is then just how many of those messages have been appended, an int
// that is its own canonical key for porcupine's cache, and exactly one
// append is legal in each state — the one whose value and offset are next
// in the final log. This checks the same thing as a model that accepts any
// growing offset: a linearization of that model that reaches the full read
// appends exactly the full read's messages in offset order, and nothing
// else below C. The only search left is where each read goes.
//
// A read does not seal its range in the model (the log grows in offset
// order, so it cannot change below an offset already appended past); that
// an offset's content never changes is internal/history.CheckPages' part.

type appendInput struct{ value string }
type appendOutput struct{ offset uint64 }
type readInput struct{ from, next uint64 }
type readOutput struct{ messages []logEntry }

// logEntry is one logged message.
type logEntry struct {
	offset uint64
	value  string
}

// logModel is the model of a log whose final content is final (offset
// order): its state is the number of final's messages appended so far.
func logModel(final []logEntry) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return 0 },
		Step: func(state, input, output any) (bool, any) {
			n := state.(int)
			switch in := input.(type) {
			case appendInput:
				if n < len(final) && final[n] == (logEntry{output.(appendOutput).offset, in.value}) {
					return true, n + 1
				}
				return false, n
			case readInput:
				return slices.Equal(between(final[:n], in.from, in.next), output.(readOutput).messages), n
			}
			return false, n
		},
		Equal: func(a, b any) bool { return a.(int) == b.(int) },
		Hash:  func(state any) uint64 { return uint64(state.(int)) },
		DescribeOperation: func(input, output any) string {
			switch in := input.(type) {
			case appendInput:
				return fmt.Sprintf("append(%s) -> %d", in.value, output.(appendOutput).offset)
			case readInput:
				return fmt.Sprintf("read[%d, %d) -> %d messages", in.from, in.next, len(output.(readOutput).messages))
			}
			return "?"
		},
		DescribeState: func(state any) string {
			n := state.(int)
			if n == 0 {
				return "empty"
			}
			return fmt.Sprintf("%d messages, last at %d", n, final[n-1].offset)
		},
	}
}

// between is the part of log (offset order) in [from, next).
func between(log []logEntry, from, next uint64) []logEntry {
	i := sort.Search(len(log), func(i int) bool { return log[i].offset >= from })
	j := sort.Search(len(log), func(j int) bool { return log[j].offset >= next })
	if j < i {
		j = i
	}
	return log[i:j]
}

// TimedRead is a full read with the times it was asked for and answered.
type TimedRead struct {
	Read              history.Read
	Started, Finished time.Time
}

// Linearizable checks the appends (acknowledged ones, and unacknowledged
// ones a read shows logged, which may take effect any time after they were
// sent), every tailed page and the full reads against the log model, whose
// final content is the first full read. It returns porcupine's verdict
// (Ok, Illegal, or Unknown on timeout) and the number of operations
// checked.
func Linearizable(ops []history.Op, pages []history.Page, reads []TimedRead, timeout time.Duration) (porcupine.CheckResult, int) {
	if len(reads) == 0 {
		return porcupine.Unknown, 0
	}
	var origin time.Time
	for _, op := range ops {
		if origin.IsZero() || op.Sent.Before(origin) {
			origin = op.Sent
		}
	}
	at := func(t time.Time) int64 { return int64(t.Sub(origin)) }
	final := entries(reads[0].Read.Messages)
	logged := make(map[string]uint64)
	for _, r := range reads {
		for _, m := range r.Read.Messages {
			logged[value(m.Producer, m.Seq)] = m.Offset
		}
	}
	var hist []porcupine.Operation
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
		hist = append(hist, o)
	}
	for _, p := range pages {
		if p.Next > p.From {
			hist = append(hist, readOp(clientID("tail "+p.Reader), p.From, p.Next, p.Messages, at(p.Started), at(p.Received)))
		}
	}
	for i, r := range reads {
		hist = append(hist, readOp(clientID(fmt.Sprintf("full read %d", i)), 0, r.Read.Committed, r.Read.Messages, at(r.Started), at(r.Finished)))
	}
	return porcupine.CheckOperationsTimeout(logModel(final), hist, timeout), len(hist)
}

func entries(messages []history.Logged) []logEntry {
	out := make([]logEntry, len(messages))
	for i, m := range messages {
		out[i] = logEntry{offset: m.Offset, value: value(m.Producer, m.Seq)}
	}
	return out
}

func readOp(client int, from, next uint64, messages []history.Logged, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: readInput{from, next}, Call: call, Output: readOutput{entries(messages)}, Return: ret}
}
