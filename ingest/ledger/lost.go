package ledger

import (
	"context"
	"fmt"
	"time"
)

// Members lost for good, in a recovery. A member whose store came back
// empty (registered in another incarnation: it answers UNKNOWN for the
// ledger and refuses its appends for ever), or whose address another store
// now holds (the node's disk was replaced), can never hold an entry again.
// When so many members are lost that fewer than A are left, an entry some
// member holds could never be rolled forward to A stores, and the recovery
// would wait for ever: it then rolls forward onto every member left and
// closes the ledger with those copies; re-replication restores the rest
// once it is closed. A member that is merely unreachable is never lost:
// it may come back with its entries.

// lostRefresh is how often a waiting recovery reads the registrations
// again.
const lostRefresh = time.Second

// LostMembers marks each member of ensemble that registered (as
// LiveStores lists them: oldest registration first) shows lost for good
// (the rule above; DESIGN §4). The newest registration at an address is
// the store serving it: a wiped store's old registration lives on until
// its lease expires (seconds, more while etcd elects), and must not hide
// that another store has its address now.
func LostMembers(ensemble []Member, registered []Member) []bool {
	byID := make(map[string]Member, len(registered))
	byAddress := make(map[string]string, len(registered))
	for _, reg := range registered {
		byID[reg.StoreID] = reg
		byAddress[reg.Address] = reg.StoreID // the newest wins
	}
	lost := make([]bool, len(ensemble))
	for i, m := range ensemble {
		reg, ok := byID[m.StoreID]
		holder, taken := byAddress[m.Address]
		// A store registered (as itself) at a new address is not lost
		// because another store took its old one.
		lost[i] = ok && reg.Incarnation != m.Incarnation || taken && holder != m.StoreID && (!ok || reg.Address == m.Address)
	}
	return lost
}

// AnyLost reports whether LostMembers marks any member, and names it.
func AnyLost(ensemble []Member, registered []Member) (Member, bool) {
	for i, l := range LostMembers(ensemble, registered) {
		if l {
			return ensemble[i], true
		}
	}
	return Member{}, false
}

// refreshLost reads the registrations again, at most every lostRefresh.
func (r *recovery) refreshLost(ctx context.Context) {
	if time.Since(r.lostAt) < lostRefresh {
		return
	}
	r.lostAt = time.Now()
	registered, err := LiveStores(ctx, r.cli)
	if err != nil {
		return // keep what was known
	}
	r.lost = LostMembers(r.meta.Ensemble, registered)
}

// rollForwardQuorum is how many holders make an entry rolled forward: A,
// or every member left when fewer than A are not lost.
func (r *recovery) rollForwardQuorum() int {
	left := len(r.meta.Ensemble)
	for _, l := range r.lost {
		if l {
			left--
		}
	}
	return max(1, min(r.meta.A, left))
}

// Weakness says, from the registered stores, why an open ledger m should
// be rolled ("" if it need not): it is degraded and enough stores are
// registered for a full ensemble (with W = A no entry has a copy to spare),
// or a member is lost for good. Either way, after the next fault its
// recovery would wait for the failed store.
func Weakness(m Metadata, registered []Member) string {
	if m.Degraded() && len(registered) >= m.IntendedW {
		return fmt.Sprintf("degraded: %d stores registered for a full ensemble of %d", len(registered), m.IntendedW)
	}
	if lost, ok := AnyLost(m.Ensemble, registered); ok {
		return fmt.Sprintf("lost a member: store %s (incarnation %d at %s) is registered anew or replaced",
			lost.StoreID, lost.Incarnation, lost.Address)
	}
	if damaged, ok := DamagedMember(m, registered); ok {
		return fmt.Sprintf("a member's journal is damaged: store %s may have lost records of ledgers up to %d",
			damaged.StoreID, damaged.MayHideThrough)
	}
	return ""
}

// DamagedMember names a member of m whose store registered (in the same
// incarnation) that journal damage may have lost records of ledgers up to
// an id at or above m's. Such a member answers UNKNOWN for what it lacks of
// m, so m's entries have one trustworthy copy fewer: a recovery after one
// more fault would wait for the store that fault took. The owner rolls m
// (Weakness); a store that came back empty is LostMembers' case instead.
func DamagedMember(m Metadata, registered []Member) (Member, bool) {
	for _, member := range m.Ensemble {
		for _, reg := range registered {
			if reg.StoreID == member.StoreID && reg.Incarnation == member.Incarnation && reg.MayHideThrough >= m.ID {
				return reg, true
			}
		}
	}
	return Member{}, false
}
