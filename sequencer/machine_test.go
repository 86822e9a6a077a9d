package sequencer

import (
	"testing"
	"time"
)

// newServing returns a machine past takeover with a first reservation of
// MinReserveBlock, one live session (1, "ing") and one open ledger (7).
func newServing(t *testing.T) *Machine {
	t.Helper()
	m, err := NewMachine(MachineConfig{Epoch: 5, MinReserveBlock: 100, ReserveAhead: time.Millisecond}, Takeover{C0: 10, Reserved: 10}, 0)
	if err != nil {
		t.Fatal(err)
	}
	rd := m.Ready()
	if rd.Reserve == nil || rd.Reserve.Expect != 10 || rd.Reserve.New != 110 {
		t.Fatalf("first reservation %+v", rd.Reserve)
	}
	m.ReservationExtended(110)
	m.SessionOpened(0, 1, "ing", 9)
	m.LedgerOpened(LedgerRef{ID: 7, Writer: "ing", Epoch: 5})
	m.Ready()
	if !m.Serving() {
		t.Fatal("not serving after the first reservation")
	}
	return m
}

func TestReservationExtendsAtHalfUse(t *testing.T) {
	m := newServing(t)
	m.RequestGrant(0, 1, 1, 7, 49)
	if rd := m.Ready(); rd.Reserve != nil || rd.Grants[0].Range != (Range{10, 59}) {
		t.Fatalf("before half use: %+v", rd)
	}
	m.RequestGrant(0, 1, 2, 7, 2) // 51 of 100 used
	rd := m.Ready()
	if rd.Reserve == nil || rd.Reserve.Expect != 110 {
		t.Fatalf("at half use: reserve %+v", rd.Reserve)
	}
	m.ReservationExtended(rd.Reserve.New)
	m.RequestGrant(0, 1, 3, 7, 1)
	if rd := m.Ready(); rd.Reserve != nil {
		t.Fatalf("extended again right after an extension: %+v", rd.Reserve)
	}
}

func TestGrantWaitsForReservationInOrder(t *testing.T) {
	m := newServing(t)
	m.RequestGrant(0, 1, 1, 7, 8)
	m.Ready()
	m.RequestGrant(0, 1, 2, 7, 8)  // fits, and crosses half use on its own? no: 16 of 100
	m.RequestGrant(0, 1, 3, 7, 90) // beyond R=110: waits
	m.RequestGrant(0, 1, 4, 7, 1)  // must wait behind 3
	rd := m.Ready()
	if len(rd.Grants) != 1 || rd.Grants[0].RequestID != 2 || rd.Reserve == nil {
		t.Fatalf("grants %+v reserve %+v", rd.Grants, rd.Reserve)
	}
	m.ReservationExtended(rd.Reserve.New)
	rd = m.Ready()
	if len(rd.Grants) != 2 || rd.Grants[0].RequestID != 3 || rd.Grants[1].RequestID != 4 ||
		rd.Grants[0].Range != (Range{26, 116}) || rd.Grants[1].Range != (Range{116, 117}) {
		t.Fatalf("after extension: %+v", rd.Grants)
	}
}

func TestGrantRefusals(t *testing.T) {
	m := newServing(t)
	m.SessionOpened(0, 2, "other", 3)
	m.LedgerOpened(LedgerRef{ID: 8, Writer: "ing", Epoch: 4}) // older epoch
	m.RequestGrant(0, 2, 1, 7, 1)                             // not the writer
	m.RequestGrant(0, 1, 2, 99, 1)                            // unknown ledger
	m.RequestGrant(0, 1, 3, 8, 1)                             // older epoch
	m.RequestGrant(0, 1, 4, 7, 0)                             // bad count
	want := []GrantStatus{StatusWrongWriter, StatusUnknownLedger, StatusLedgerNotOpen, StatusBadRequest}
	rd := m.Ready()
	for i, g := range rd.Grants {
		if g.Status != want[i] {
			t.Fatalf("reply %d: %v, want %v", i, g.Status, want[i])
		}
	}
	// A silent session dies: its grants are refused and its ledger closed.
	m.Tick(2 * time.Second)
	rd = m.Ready()
	if len(rd.Closes) != 1 || rd.Closes[0].Ledger != 7 || len(rd.EndSessions) != 2 {
		t.Fatalf("after session timeout: closes %+v ends %+v", rd.Closes, rd.EndSessions)
	}
	m.RequestGrant(2*time.Second, 1, 5, 7, 1)
	if rd := m.Ready(); rd.Grants[0].Status != StatusSessionDead {
		t.Fatalf("grant on a dead session: %v", rd.Grants[0].Status)
	}
}

func TestLeaseExpiryClosesThenRecoversAndHolesOnlyUnwritten(t *testing.T) {
	m := newServing(t)
	m.RequestGrant(0, 1, 1, 7, 5) // [10,15)
	m.RequestGrant(0, 1, 2, 7, 5) // [15,20)
	m.Ready()
	m.Written(10*time.Millisecond, 1, 7, 0, Range{10, 15})
	for now := 100 * time.Millisecond; now <= 3*time.Second; now += 100 * time.Millisecond {
		m.Heard(now, 1)
		m.Tick(now)
	}
	rd := m.Ready()
	if len(rd.Closes) != 1 || rd.Closes[0].Session != 1 {
		t.Fatalf("lease expiry: closes %+v", rd.Closes)
	}
	// The writer does not close in time: recovery.
	m.Heard(3200*time.Millisecond, 1)
	m.Tick(3200 * time.Millisecond)
	if rd := m.Ready(); len(rd.Recovers) != 1 || rd.Recovers[0] != 7 {
		t.Fatalf("close timeout: recovers %+v", rd.Recovers)
	}
	// No hole before the ledger is closed, whatever the clocks say.
	if m.resolvedEnd != 15 {
		t.Fatalf("resolved prefix %d before the close", m.resolvedEnd)
	}
	// Recovery found entry 1 = [15,17) (a partial write rolled forward) — the
	// rest of the grant, [17,20), is a hole.
	m.LedgerClosed(3300*time.Millisecond, 7, []EntrySpan{{0, Range{10, 15}}, {1, Range{15, 17}}})
	rd = m.Ready()
	want := []Record{
		{Kind: KindWritten, Range: Range{15, 17}, Ledger: 7, Entry: 1},
		{Kind: KindHole, Range: Range{17, 20}},
		{Kind: KindWatermark, Watermark: 20},
	}
	if len(rd.Records) != len(want) {
		t.Fatalf("records %v", rd.Records)
	}
	for i, r := range rd.Records {
		r.Seq = 0
		if r != want[i] {
			t.Fatalf("record %d = %v, want %v", i, r, want[i])
		}
	}
	if rd.HasPublished {
		t.Fatal("C published before its watermark was confirmed")
	}
	m.Confirmed(rd.Records[2].Seq)
	if rd := m.Ready(); !rd.HasPublished || rd.Published != 20 {
		t.Fatalf("published %v %d", rd.HasPublished, rd.Published)
	}
}
