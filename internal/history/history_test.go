package history

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func goodHistory() ([]Op, Read) {
	ops := []Op{
		{Producer: "a", Seq: 0, Sent: at(0), Acked: at(5), Offset: 0},
		{Producer: "b", Seq: 0, Sent: at(1), Acked: at(6), Offset: 1},
		{Producer: "a", Seq: 1, Sent: at(2), Acked: at(7), Offset: 3},
		{Producer: "a", Seq: 2, Sent: at(8)}, // never acked, never logged
	}
	read := Read{
		Messages:  []Logged{{0, "a", 0}, {1, "b", 0}, {3, "a", 1}},
		Holes:     [][2]uint64{{2, 3}},
		Committed: 4,
	}
	return ops, read
}

func TestCheckAcceptsAGoodHistory(t *testing.T) {
	ops, read := goodHistory()
	report, errs := Check(ops, read)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if report.Acked != 3 || report.Logged != 3 || report.HoleOffsets != 1 {
		t.Fatalf("report %v", report)
	}
}

func TestCheckFindsEachViolation(t *testing.T) {
	cases := map[string]struct {
		mutate func(ops []Op, read *Read) []Op
		want   string
	}{
		"lost_ack": {func(ops []Op, r *Read) []Op {
			r.Messages = r.Messages[:2]
			r.Holes = append(r.Holes, [2]uint64{3, 4})
			return ops
		}, "not in the log"},
		"moved": {func(ops []Op, r *Read) []Op { ops[2].Offset = 2; return ops }, "logged at 3"},
		"duplicate": {func(ops []Op, r *Read) []Op {
			r.Messages = append(r.Messages, Logged{4, "a", 1})
			r.Committed = 5
			return ops
		}, "logged twice"},
		"gap": {func(ops []Op, r *Read) []Op { r.Holes = nil; return ops }, "neither a message nor a hole"},
		"producer_order": {func(ops []Op, r *Read) []Op {
			r.Messages[0], r.Messages[2] = Logged{0, "a", 1}, Logged{3, "a", 0}
			ops[0].Offset, ops[2].Offset = 3, 0
			return ops
		}, "logged after seq"},
		"real_time": {func(ops []Op, r *Read) []Op {
			ops[1].Sent = at(5 + 1)
			ops[1].Offset = 1
			ops[0].Offset = 0
			ops[0].Acked = at(5)
			ops = append(ops, Op{Producer: "c", Seq: 0, Sent: at(9), Acked: at(10), Offset: 0})
			return ops
		}, "acknowledged before"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ops, read := goodHistory()
			ops = tc.mutate(ops, &read)
			_, errs := Check(ops, read)
			for _, err := range errs {
				if strings.Contains(err.Error(), tc.want) {
					return
				}
			}
			t.Fatalf("want an error containing %q, got %v", tc.want, errs)
		})
	}
}

func TestRecorderRejectsConflictingAcks(t *testing.T) {
	r := NewRecorder()
	r.Sent("a", 0, at(0))
	if err := r.Acked("a", 0, 7, at(1)); err != nil {
		t.Fatal(err)
	}
	if err := r.Acked("a", 0, 7, at(2)); err != nil {
		t.Fatalf("same offset again: %v", err)
	}
	if err := r.Acked("a", 0, 8, at(3)); err == nil {
		t.Fatal("a second offset for one message was accepted")
	}
	if err := r.Acked("z", 0, 1, at(3)); err == nil {
		t.Fatal("an ack of an unsent message was accepted")
	}
}

func TestReadBelow(t *testing.T) {
	_, read := goodHistory()
	cut := read.Below(3)
	if cut.Committed != 3 || len(cut.Messages) != 2 || len(cut.Holes) != 1 || cut.Holes[0] != [2]uint64{2, 3} {
		t.Fatalf("below 3: %+v", cut)
	}
	if _, errs := Check(nil, read.Below(2)); len(errs) != 0 {
		t.Fatalf("below 2 is not dense: %v", errs)
	}
}
