package ledger

import (
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"orderlog/proto/walpb"
)

// The batched part of recovery: one round of streamed reads decides a
// window of entries with decideEntry, entry by entry in order, exactly as
// single reads would, and the entries to roll forward are copied on one
// stream per store (one group commit instead of one fsync per entry).

// recoveryWindow is how many entries one round reads and rolls forward.
const recoveryWindow = 256

// settleWindow decides entries from..from+recoveryWindow-1 from one round of
// answers. It returns the first entry not settled, and ended=true when the
// entry before it is the ledger's last (W−A+1 ABSENT answers for next).
func (r *recovery) settleWindow(ctx context.Context, from int64) (next int64, ended bool, err error) {
	reads := r.readWindow(ctx, from, recoveryWindow)
	var copies []*walpb.AddEntry
	k := 0
	for ; k < len(reads); k++ {
		verdict, holder := decideEntry(reads[k], r.fenced, r.meta.W, r.meta.A)
		if verdict == verdictEnd {
			ended = true
			break
		}
		if verdict != verdictRollForward {
			break // wait or conflict: the entry-by-entry path decides it
		}
		r.spans[from+int64(k)] = spanOf(reads[k][holder].span)
		copies = append(copies, r.copyOf(from+int64(k), reads[k][holder]))
	}
	if k == 0 {
		return from, ended, ctx.Err()
	}
	if settled := r.rollForward(ctx, from, reads[:k], copies); settled < k {
		return from + int64(settled), false, ctx.Err()
	}
	return from + int64(k), ended, nil
}

// readWindow streams entries from..from+n-1 from every store. reads[k][i]
// is store i's answer for entry from+k; a store's stream ends at its first
// answer that is not PRESENT, so later entries get no answer from it.
//
// It stops waiting for members that missed the fence once the fenced ones
// have answered and their answers decide the window's first entry.
func (r *recovery) readWindow(ctx context.Context, from int64, n int) [][]entryRead {
	reads := make([][]entryRead, n)
	for k := range reads {
		reads[k] = make([]entryRead, len(r.clients))
	}
	timeouts := r.callTimeouts() // read here: the calls may outlive this round
	askAll(len(r.clients), nil, func(i int) []entryRead {
		column := make([]entryRead, n) // store i's answers; entries it did not answer stay answerNone
		ctx, cancel := context.WithTimeout(ctx, timeouts[i])
		defer cancel()
		stream, err := r.clients[i].ReadEntries(ctx, &walpb.ReadEntriesRequest{LedgerId: r.meta.ID,
			StoreIncarnation: r.meta.Ensemble[i].Incarnation, FirstEntry: from, LastEntry: from + int64(n) - 1})
		if err != nil {
			return column
		}
		for k := 0; k < n; k++ {
			resp, err := stream.Recv()
			if err != nil || resp.EntryId != from+int64(k) {
				return column
			}
			column[k] = entryRead{answer: answerOf(resp.Status), span: resp.Span, payload: resp.Payload}
			if resp.Status != walpb.EntryStatus_PRESENT {
				return column
			}
		}
		return column
	}, decidedByFenced(r, func(i int, column []entryRead) []entryRead {
		for k := range reads {
			reads[k][i] = column[k]
		}
		return reads[0]
	}))
	return reads
}

// unfencedCallTimeout bounds the reads from a member that did not answer
// the fence: it is most likely down or paused, and its ABSENT would not
// count, so the walk does not wait a whole CallTimeout for it at every
// entry (a paused store kept a recovery going for 5 s). Its PRESENT can
// still matter (the only holder besides a wiped member): the walk asks it
// again at every round, and a live store answers well within this bound.
// Copies to it are still made: it may be needed to reach A.
const unfencedCallTimeout = 250 * time.Millisecond

// callTimeouts is how long a call to each member may take. After
// unfencedShortRounds rounds a member that missed the fence gets the whole
// CallTimeout again: it may be the only holder of an entry and merely slow.
func (r *recovery) callTimeouts() []time.Duration {
	out := make([]time.Duration, len(r.clients))
	for i := range out {
		out[i] = r.opts.CallTimeout
		if r.fenced != nil && !r.fenced[i] && r.rounds < unfencedShortRounds {
			out[i] = min(r.opts.CallTimeout, unfencedCallTimeout)
		}
	}
	return out
}

// unfencedShortRounds is how many reads of one entry a member that missed
// the fence gets with unfencedCallTimeout.
const unfencedShortRounds = 8

func (r *recovery) copyOf(entry int64, held entryRead) *walpb.AddEntry {
	return &walpb.AddEntry{LedgerId: r.meta.ID, EntryId: entry, Span: held.span, Lac: entry - 1,
		Payload: held.payload, Recovery: true, RequestId: uint64(entry)}
}

// rollForward copies entries from.. (copies[k] is entry from+k, reads[k]
// the answers it was decided on) to every store not holding them and
// returns how many leading entries A stores now hold. Stores hold dense
// prefixes, so a store holds entries up to its first non-PRESENT answer and
// takes the rest as one suffix; a store lacking even earlier entries
// refuses with a gap and is backfilled first.
func (r *recovery) rollForward(ctx context.Context, from int64, reads [][]entryRead, copies []*walpb.AddEntry) int {
	holds := make([]int, len(r.clients)) // store i holds entries from..from+holds[i]-1
	for i := range r.clients {
		for holds[i] < len(reads) && reads[holds[i]][i].answer == answerPresent {
			holds[i]++
		}
	}
	settled := func() int { // leading entries A stores hold
		for k := range reads {
			holders := make([]bool, len(r.clients))
			for i := range holders {
				holders[i] = holds[i] > k
			}
			if !rolledForward(holders, r.rollForwardQuorum()) {
				return k
			}
		}
		return len(reads)
	}
	// Copies go to every member lacking entries, but once A hold them all
	// the walk goes on without waiting for the slow ones.
	fenced := slices.Clone(r.fenced) // the copies may outlive this call; the walk goes on fencing
	copyAll := func(take func(i, held int) bool) {
		askAll(len(r.clients), func(i int) bool {
			k0 := holds[i]
			if k0 == len(reads) || reads[k0][i].answer == answerUnknown {
				return true // holds all, or cannot hold for this ledger (newer incarnation, damage)
			}
			return !r.copying[i].CompareAndSwap(false, true) // an earlier copy still goes there
		}, func(i int) int {
			defer r.copying[i].Store(false)
			return holds[i] + r.copyTo(ctx, i, from+int64(holds[i]), copies[holds[i]:], fenced)
		}, take)
	}
	if settled() == len(reads) { // A hold them already: copy to the others in the background
		go copyAll(func(int, int) bool { return false })
		return len(reads)
	}
	copyAll(func(i int, held int) bool {
		holds[i] = held
		return settled() == len(reads)
	})
	return settled()
}

// copyTo appends entries (first, first+1, ...) to store i and returns how
// many leading ones it acked. On a gap it copies the store's missing
// entries before first from the others, then retries.
func (r *recovery) copyTo(ctx context.Context, i int, first int64, entries []*walpb.AddEntry, fenced []bool) int {
	acked, code := r.addAll(ctx, i, entries)
	if acked > 0 || code != walpb.AddCode_ADD_GAP {
		return acked
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.CallTimeout)
	resp, err := r.clients[i].LastEntry(cctx, &walpb.LastEntryRequest{LedgerId: r.meta.ID, StoreIncarnation: r.meta.Ensemble[i].Incarnation})
	cancel()
	if err != nil || resp.Status != walpb.EntryStatus_PRESENT || resp.LastEntry >= first {
		return 0
	}
	rd := r.reader(first-1, fenced)
	var missing []*walpb.AddEntry
	for id := resp.LastEntry + 1; id < first; id++ {
		e, err := rd.Read(ctx, id)
		if err != nil {
			return 0
		}
		missing = append(missing, r.copyOf(id, entryRead{span: e.Span.proto(), payload: e.Payload}))
	}
	acked, _ = r.addAll(ctx, i, append(missing, entries...))
	return max(0, acked-len(missing))
}

// addAll appends entries (recovery adds, in order) to store i on one stream
// and returns how many leading entries were acked, and the first code that
// was not ADD_OK (ADD_CODE_UNSPECIFIED for a transport failure).
func (r *recovery) addAll(ctx context.Context, i int, entries []*walpb.AddEntry) (int, walpb.AddCode) {
	timeout := r.opts.CallTimeout * time.Duration(1+len(entries)/recoveryWindow)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stream, err := r.clients[i].AddEntries(ctx)
	if err != nil {
		return 0, walpb.AddCode_ADD_CODE_UNSPECIFIED
	}
	index := make(map[int64]int, len(entries))
	for start := 0; start < len(entries); start += recoveryWindow {
		frame := make([]*walpb.AddEntry, 0, recoveryWindow)
		for k, e := range entries[start:min(start+recoveryWindow, len(entries))] {
			e := proto.Clone(e).(*walpb.AddEntry)
			e.StoreIncarnation = r.meta.Ensemble[i].Incarnation
			frame = append(frame, e)
			index[e.EntryId] = start + k
		}
		if err := stream.Send(&walpb.AddEntriesRequest{Entries: frame}); err != nil {
			return 0, walpb.AddCode_ADD_CODE_UNSPECIFIED
		}
	}
	_ = stream.CloseSend()
	ok := make([]bool, len(entries))
	answered := 0
	code := walpb.AddCode_ADD_OK
	for answered < len(entries) && code == walpb.AddCode_ADD_OK {
		resp, err := stream.Recv()
		if err != nil {
			code = walpb.AddCode_ADD_CODE_UNSPECIFIED
			break
		}
		for _, res := range resp.Results {
			k, mine := index[res.EntryId]
			if res.LedgerId != r.meta.ID || !mine {
				continue
			}
			answered++
			if res.Code == walpb.AddCode_ADD_OK {
				ok[k] = true
			} else if code == walpb.AddCode_ADD_OK {
				code = res.Code
			}
		}
	}
	acked := 0
	for acked < len(ok) && ok[acked] {
		acked++
	}
	return acked, code
}
