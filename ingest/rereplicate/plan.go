package rereplicate

import (
	"cmp"
	"slices"
	"time"

	"orderlog/ingest/ledger"
)

// liveness is what the worker knows of the stores at one moment: the
// registrations, and since when each store it has seen in an ensemble has
// been unregistered. It does no I/O.
type liveness struct {
	registered map[string]ledger.Member // store id → current incarnation and address
	goneSince  map[string]time.Time
	now        time.Time
	grace      time.Duration
}

// decision is what plan says about one closed ledger.
type decision struct {
	// keep are the members that still count as copies, in ensemble order.
	keep []ledger.Member
	// sources are the kept members that are registered now (they can be
	// read), with their registered address.
	sources []ledger.Member
	// lost are the members that no longer count.
	lost []ledger.Member
	// partial are registered members in the ledger's incarnation that
	// answered that they lack entries ≤ last (down while the tail was
	// written or rolled forward): not copies, but the first targets, since
	// a copy onto them resumes after what they hold.
	partial []ledger.Member
	// need is how many copies to add: IntendedW − len(keep), or 0.
	need int
}

// plan decides which members of the closed ledger m still count as copies.
// A member is lost when its store is registered in another incarnation
// (it came back empty), when another store is registered at its address
// (the node's disk was replaced: a wiped store also gets a new store id),
// or when its registration has been gone for Grace or longer. A member in
// partial (by store id) answered that it lacks some entries ≤ last: it is
// registered in the right incarnation yet no copy.
func plan(m ledger.Metadata, l liveness, partial map[string]bool) decision {
	byAddress := make(map[string]string, len(l.registered))
	for id, reg := range l.registered {
		byAddress[reg.Address] = id
	}
	var d decision
	for _, member := range m.Ensemble {
		reg, registered := l.registered[member.StoreID]
		replaced, taken := byAddress[member.Address]
		switch {
		case registered && reg.Incarnation == member.Incarnation && partial[member.StoreID]:
			d.partial = append(d.partial, reg)
		case registered && reg.Incarnation == member.Incarnation:
			d.keep = append(d.keep, member)
			d.sources = append(d.sources, reg)
		case registered: // came back empty: a new incarnation holds nothing of it
			d.lost = append(d.lost, member)
		case taken && replaced != member.StoreID:
			d.lost = append(d.lost, member)
		case l.now.Sub(l.goneSince[member.StoreID]) < l.grace:
			d.keep = append(d.keep, member)
		default:
			d.lost = append(d.lost, member)
		}
	}
	d.need = max(0, intendedW(m)-len(d.keep))
	return d
}

func intendedW(m ledger.Metadata) int { return max(m.IntendedW, m.W) }

// targets picks up to n registered stores that are not among d.keep: the
// partial members first, then the least loaded (ties by store id); load
// counts ensemble memberships.
func targets(d decision, registered map[string]ledger.Member, load map[string]int, n int) []ledger.Member {
	var candidates []ledger.Member
	for id, reg := range registered {
		if !slices.ContainsFunc(d.keep, func(m ledger.Member) bool { return m.StoreID == id }) {
			candidates = append(candidates, reg)
		}
	}
	isPartial := func(m ledger.Member) int {
		if slices.ContainsFunc(d.partial, func(p ledger.Member) bool { return p.StoreID == m.StoreID }) {
			return 0
		}
		return 1
	}
	slices.SortFunc(candidates, func(a, b ledger.Member) int {
		return cmp.Or(cmp.Compare(isPartial(a), isPartial(b)), cmp.Compare(load[a.StoreID], load[b.StoreID]), cmp.Compare(a.StoreID, b.StoreID))
	})
	return candidates[:min(n, len(candidates))]
}
