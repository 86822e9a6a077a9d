package pipeline

import "testing"

// grantAndAppend grants every batch of r's grant requests at consecutive
// offsets from first and appends them as consecutive entries from entry.
func grantAndAppend(t *testing.T, p *Pipeline, r Ready, first uint64, entry int64) Ready {
	t.Helper()
	for _, g := range r.GrantRequests {
		if err := p.Granted(g.BatchID, first); err != nil {
			t.Fatal(err)
		}
		first += uint64(g.Count)
	}
	out := p.Ready()
	for _, b := range out.Appends {
		if err := p.Appended(b.ID, entry); err != nil {
			t.Fatal(err)
		}
		entry++
	}
	return out
}

func TestRollKeepsSealingIntoTheOpenLedgerUntilTheNextIsOpen(t *testing.T) {
	p := mustNew(t, Config{MaxBatchMessages: 1, MaxInFlight: 8})
	p.LedgerOpened(1)
	if !p.Roll() || p.Roll() {
		t.Fatal("a roll is asked once")
	}
	p.Add(msgs(1, 0, 1)...)
	r := p.Ready()
	if !r.NeedLedger || len(r.GrantRequests) != 1 || r.GrantRequests[0].Ledger != 1 {
		t.Fatalf("while the next ledger opens, L1 takes batches: %+v", r)
	}
	grantAndAppend(t, p, r, 10, 1)
	p.LedgerOpened(2)
	p.Add(msgs(1, 1, 1)...)
	if r = p.Ready(); len(r.GrantRequests) != 0 || r.Switched != nil {
		t.Fatalf("L1 drains before L2 takes a batch: %+v", r)
	}
	p.Confirmed(1, 1)
	r = p.Ready()
	if len(r.Logged) != 1 || r.Switched == nil || *r.Switched != (Switch{Old: 1, New: 2}) {
		t.Fatalf("drained: logged and switched: %+v", r)
	}
	if len(r.GrantRequests) != 1 || r.GrantRequests[0].Ledger != 2 {
		t.Fatalf("the waiting message goes to L2 in the same Ready: %+v", r.GrantRequests)
	}
	p.LedgerClosed(1, 1) // the old ledger's close changes nothing
	if r = p.Ready(); !r.Empty() || p.Ledger() != 2 {
		t.Fatalf("after the old close: %+v, ledger %d", r, p.Ledger())
	}
}

func TestAFailureWhileDrainingRegrantsIntoTheNextLedgerInOrder(t *testing.T) {
	p := mustNew(t, Config{MaxBatchMessages: 1, MaxInFlight: 8})
	p.LedgerOpened(1)
	p.Roll()
	p.Add(msgs(1, 0, 2)...)
	r := p.Ready()
	grantAndAppend(t, p, r, 10, 1)
	p.LedgerOpened(2)
	p.Add(msgs(1, 2, 1)...)
	p.Ready()
	p.Confirmed(1, 1)
	p.LedgerFailing(1)
	p.LedgerClosed(1, 1) // seq 1 (entry 2) is beyond last
	r = p.Ready()
	if r.Switched == nil || *r.Switched != (Switch{Old: 1, New: 2, Closed: true}) {
		t.Fatalf("switched after the close: %+v", r.Switched)
	}
	if len(r.GrantRequests) != 2 || r.GrantRequests[0].Ledger != 2 {
		t.Fatalf("grants %+v", r.GrantRequests)
	}
	out := grantAndAppend(t, p, r, 20, 1)
	if len(out.Appends) != 2 || out.Appends[0].Messages[0].Seq != 1 || out.Appends[1].Messages[0].Seq != 2 {
		t.Fatalf("seq 1 is granted again before seq 2: %+v", out.Appends)
	}
}

func TestAFailureBeforeTheRollsLedgerOpensWaitsForIt(t *testing.T) {
	p := mustNew(t, Config{MaxBatchMessages: 1, MaxInFlight: 8})
	p.LedgerOpened(1)
	p.Roll()
	p.Add(msgs(1, 0, 1)...)
	r := p.Ready()
	p.LedgerFailing(1)
	p.LedgerClosed(1, 0)
	if r = p.Ready(); r.NeedLedger {
		t.Fatal("the roll's ledger is on its way: no second one is asked for")
	}
	p.LedgerOpened(2)
	r = p.Ready()
	if r.Switched == nil || *r.Switched != (Switch{Old: 1, New: 2, Closed: true}) || len(r.GrantRequests) != 1 || r.GrantRequests[0].Ledger != 2 {
		t.Fatalf("the roll's ledger replaces the failed one: %+v", r)
	}
}

func TestTheNextLedgerFailingLeavesTheOpenOneAndAllowsAnotherRoll(t *testing.T) {
	p := mustNew(t, Config{MaxBatchMessages: 1, MaxInFlight: 8})
	p.LedgerOpened(1)
	p.Roll()
	p.LedgerOpened(2)
	p.LedgerFailing(2)
	p.Add(msgs(1, 0, 1)...)
	if r := p.Ready(); len(r.GrantRequests) != 1 || r.GrantRequests[0].Ledger != 1 {
		t.Fatalf("L1 takes batches again: %+v", r)
	}
	if !p.Roll() {
		t.Fatal("a new roll can be asked")
	}
	p.LedgerOpenFailed()
	if !p.Roll() {
		t.Fatal("after a failed open a new roll can be asked")
	}
}

func TestTheRollsLedgerOpeningWhileTheOldFailsWaitsForTheClose(t *testing.T) {
	p := mustNew(t, Config{MaxBatchMessages: 1, MaxInFlight: 8})
	p.LedgerOpened(1)
	p.Roll()
	p.Add(msgs(1, 0, 1)...)
	r := p.Ready()
	grantAndAppend(t, p, r, 10, 1)
	p.LedgerFailing(1)
	p.LedgerOpened(2)
	p.Add(msgs(1, 1, 1)...)
	if r = p.Ready(); len(r.GrantRequests) != 0 || r.Switched != nil {
		t.Fatalf("nothing goes to L2 before L1's close: %+v", r)
	}
	p.LedgerClosed(1, 0) // seq 0 is beyond last
	r = p.Ready()
	if r.Switched == nil || len(r.GrantRequests) != 2 || r.GrantRequests[0].Ledger != 2 {
		t.Fatalf("after the close: %+v", r)
	}
	out := grantAndAppend(t, p, r, 20, 1)
	if len(out.Appends) != 2 || out.Appends[0].Messages[0].Seq != 0 || out.Appends[1].Messages[0].Seq != 1 {
		t.Fatalf("seq 0 first: %+v", out.Appends)
	}
}
