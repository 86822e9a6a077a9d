package ledger

import "testing"

func TestDecideFence(t *testing.T) {
	p := func(lac int64) fenceAnswer { return fenceAnswer{answer: answerPresent, lac: lac} }
	unknown, none := fenceAnswer{answer: answerUnknown}, fenceAnswer{answer: answerNone}
	cases := map[string]struct {
		answers    []fenceAnswer
		w, a       int
		fenced     bool
		startAfter int64
	}{
		"two_of_three":           {[]fenceAnswer{p(4), none, p(7)}, 3, 2, true, 7},
		"one_of_three":           {[]fenceAnswer{p(4), none, none}, 3, 2, false, 4},
		"unknown_counts_fenced":  {[]fenceAnswer{unknown, none, p(2)}, 3, 2, true, 2},
		"all_unknown_start_zero": {[]fenceAnswer{unknown, unknown, none}, 3, 2, true, -1},
		"five_three_needs_three": {[]fenceAnswer{p(1), p(9), none, none, none}, 5, 3, false, 9},
		"five_three_three":       {[]fenceAnswer{p(1), p(9), none, unknown, none}, 5, 3, true, 9},
		"single":                 {[]fenceAnswer{p(3)}, 1, 1, true, 3},
	}
	for name, c := range cases {
		fenced, start := decideFence(c.answers, c.w, c.a)
		if fenced != c.fenced || start != c.startAfter {
			t.Errorf("%s: got (%v, %d), want (%v, %d)", name, fenced, start, c.fenced, c.startAfter)
		}
	}
}

func TestDecideEntry(t *testing.T) {
	present := func(b string) entryRead { return entryRead{answer: answerPresent, payload: []byte(b)} }
	absent, unknown, none := entryRead{answer: answerAbsent}, entryRead{answer: answerUnknown}, entryRead{}
	cases := map[string]struct {
		reads   []entryRead
		w, a    int
		verdict entryVerdict
		holder  int
	}{
		"one_holder_rolls_forward":           {[]entryRead{absent, present("x"), absent}, 3, 2, verdictRollForward, 1},
		"holder_beats_absent_quorum":         {[]entryRead{absent, absent, present("x")}, 3, 2, verdictRollForward, 2},
		"two_absent_end":                     {[]entryRead{absent, none, absent}, 3, 2, verdictEnd, -1},
		"unknown_is_not_absent":              {[]entryRead{absent, unknown, none}, 3, 2, verdictWait, -1},
		"all_unknown_wait":                   {[]entryRead{unknown, unknown, unknown}, 3, 2, verdictWait, -1},
		"silence_wait":                       {[]entryRead{none, none, absent}, 3, 2, verdictWait, -1},
		"five_three_needs_three_absent":      {[]entryRead{absent, absent, unknown, none, none}, 5, 3, verdictWait, -1},
		"five_three_three_absent":            {[]entryRead{absent, absent, unknown, absent, none}, 5, 3, verdictEnd, -1},
		"identical_copies":                   {[]entryRead{present("x"), present("x"), absent}, 3, 2, verdictRollForward, 0},
		"different_copies_conflict":          {[]entryRead{present("x"), present("y"), absent}, 3, 2, verdictConflict, -1},
		"single_absent_ends_single_machine":  {[]entryRead{absent}, 1, 1, verdictEnd, -1},
		"single_unknown_waits":               {[]entryRead{unknown}, 1, 1, verdictWait, -1},
		"w3_a3_one_absent_is_enough_to_stop": {[]entryRead{absent, unknown, none}, 3, 3, verdictEnd, -1},
	}
	for name, c := range cases {
		fenced := make([]bool, len(c.reads))
		for i := range fenced {
			fenced[i] = true
		}
		verdict, holder := decideEntry(c.reads, fenced, c.w, c.a)
		if verdict != c.verdict || holder != c.holder {
			t.Errorf("%s: got (%d, %d), want (%d, %d)", name, verdict, holder, c.verdict, c.holder)
		}
	}
	// An unfenced store's ABSENT does not count: it may still take the
	// writer's append, which with another store's earlier ack confirms the
	// entry.
	if verdict, _ := decideEntry([]entryRead{absent, none, absent}, []bool{true, true, false}, 3, 2); verdict != verdictWait {
		t.Errorf("ABSENT from an unfenced store ended the ledger (verdict %d)", verdict)
	}
}

func TestRolledForward(t *testing.T) {
	if rolledForward([]bool{true, false, false}, 2) {
		t.Error("one holder counted as two")
	}
	if !rolledForward([]bool{true, false, true}, 2) {
		t.Error("two holders not enough for A=2")
	}
}
