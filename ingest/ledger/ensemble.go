package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/proto/walpb"
)

// This file changes the ensemble of a closed ledger (DESIGN §4,
// re-replication): copy its entries onto a store that lacks them, then
// swap the ensemble in etcd by compare-and-swap. Open and recovering
// ledgers are never changed: their writer (or recoverer) owns the
// ensemble until the close.

// ErrEnsembleChanged is returned by ChangeEnsemble when the ledger's record
// changed since the caller read it (another re-replication won): nothing
// was written; read the record again and decide anew.
var ErrEnsembleChanged = errors.New("ledger: record changed since read")

// CopyOptions tune CopyClosed. Zero values take the defaults.
type CopyOptions struct {
	// Stores reaches the sources and the target.
	Stores Dialer
	// MaxFrameEntries and MaxFrameBytes bound one AddEntries frame.
	// Defaults 256 and 1 MiB.
	MaxFrameEntries int
	MaxFrameBytes   int
	// CallTimeout bounds each unary store call. Default 5 s.
	CallTimeout time.Duration
}

func (o *CopyOptions) fillDefaults() {
	if o.MaxFrameEntries <= 0 {
		o.MaxFrameEntries = 256
	}
	if o.MaxFrameBytes <= 0 {
		o.MaxFrameBytes = 1 << 20
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 5 * time.Second
	}
}

// CopyClosed copies entries 0..m.LastEntry of the closed ledger m onto
// target, reading each from sources (members that hold the ledger; the
// first with a valid checksum serves), and closes it there at LastEntry.
// It resumes after the entries target already holds (a copy interrupted
// earlier, a member that missed the tail). Entries travel as the spans,
// LACs and payload bytes the sources return, as recovery appends (accepted
// on a ledger the target never saw, on a fenced one, and on a closed one
// up to its last entry); no store decodes a payload. It returns only once
// every entry up to LastEntry is known held by target, fsynced: target
// answers that it holds them, or — on a store that answers UNKNOWN for the
// ledger because damage in its journal may have held more of it — this
// call appended every one of them with ADD_OK and target still holds up to
// LastEntry after the close.
func CopyClosed(ctx context.Context, m Metadata, sources []Member, target Member, o CopyOptions) error {
	o.fillDefaults()
	switch {
	case m.State != StateClosed:
		return fmt.Errorf("copy ledger %d: %w", m.ID, ErrNotClosed)
	case o.Stores == nil:
		return fmt.Errorf("%w: no store dialer", ErrBadConfig)
	case len(sources) == 0 && m.LastEntry >= 0:
		return fmt.Errorf("copy ledger %d: no source holds it: %w", m.ID, ErrUnreadable)
	}
	client, err := o.Stores.Client(target)
	if err != nil {
		return err
	}
	before, err := lastOnStore(ctx, client, m.ID, target, o.CallTimeout)
	if err != nil {
		return err
	}
	first := before.resumeAt()
	if first <= m.LastEntry {
		if err := copyEntries(ctx, m, sources, target, client, first, o); err != nil {
			return fmt.Errorf("copy ledger %d to store %s: %w", m.ID, target.StoreID, err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, o.CallTimeout)
	defer cancel()
	if _, err := client.CloseLedger(cctx, &walpb.CloseLedgerRequest{LedgerId: m.ID, StoreIncarnation: target.Incarnation, LastEntry: m.LastEntry}); err != nil {
		return fmt.Errorf("close ledger %d on store %s: %w", m.ID, target.StoreID, err)
	}
	after, err := lastOnStore(ctx, client, m.ID, target, o.CallTimeout)
	if err != nil {
		return err
	}
	switch {
	case after.last != m.LastEntry:
		return fmt.Errorf("ledger %d: store %s holds up to entry %d after the copy, last is %d", m.ID, target.StoreID, after.last, m.LastEntry)
	case !after.trusted && first > 0:
		// Entries below first were counted from an answer the store no
		// longer stands by; the next attempt copies from entry 0.
		return fmt.Errorf("ledger %d: store %s answers UNKNOWN for entries it held before the copy", m.ID, target.StoreID)
	}
	return nil
}

// heldPrefix is a store's LastEntry answer for one ledger.
type heldPrefix struct {
	// last is the last entry the store holds, fsynced (-1: none).
	last int64
	// trusted: the store answered PRESENT, so it holds every entry up to
	// last. An UNKNOWN answer (damage in its journal may have held entries
	// of the ledger, or another incarnation) vouches for none of them.
	trusted bool
}

// resumeAt is the first entry a copy must write: after a trusted prefix,
// else entry 0 (identical re-appends succeed, a different existing entry
// fails the copy).
func (h heldPrefix) resumeAt() int64 {
	if h.trusted {
		return h.last + 1
	}
	return 0
}

// lastOnStore asks the target which entries of the ledger it holds.
func lastOnStore(ctx context.Context, c walpb.WALClient, id uint64, target Member, timeout time.Duration) (heldPrefix, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.LastEntry(ctx, &walpb.LastEntryRequest{LedgerId: id, StoreIncarnation: target.Incarnation})
	if err != nil {
		return heldPrefix{last: -1}, fmt.Errorf("store %s: last entry of ledger %d: %w", target.StoreID, id, err)
	}
	return heldPrefix{last: max(resp.LastEntry, -1), trusted: resp.Status == walpb.EntryStatus_PRESENT}, nil
}

// copyEntries streams entries first..m.LastEntry from sources to target on
// one AddEntries stream and waits for every result.
func copyEntries(ctx context.Context, m Metadata, sources []Member, target Member, client walpb.WALClient, first int64, o CopyOptions) error {
	src := m
	src.Ensemble = sources
	reader, err := NewReader(src, m.LastEntry, ReaderOptions{Stores: o.Stores})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.AddEntries(ctx)
	if err != nil {
		return err
	}
	results := make(chan error, 1)
	go func() { results <- awaitResults(stream, m.LastEntry-first+1) }()
	frame, bytes := &walpb.AddEntriesRequest{}, 0
	send := func() error {
		if len(frame.Entries) == 0 {
			return nil
		}
		err := stream.Send(frame)
		frame, bytes = &walpb.AddEntriesRequest{}, 0
		return err
	}
	err = reader.Scan(ctx, first, m.LastEntry, func(e Entry) error {
		frame.Entries = append(frame.Entries, &walpb.AddEntry{
			LedgerId: m.ID, StoreIncarnation: target.Incarnation, EntryId: e.ID, Span: e.Span.proto(),
			Lac: e.LAC, Payload: e.Payload, Recovery: true, RequestId: uint64(e.ID),
		})
		if bytes += len(e.Payload); len(frame.Entries) >= o.MaxFrameEntries || bytes >= o.MaxFrameBytes {
			return send()
		}
		return nil
	})
	if err == nil {
		err = send()
	}
	if err != nil {
		cancel()
		<-results
		return err
	}
	_ = stream.CloseSend()
	return <-results
}

// awaitResults reads n results and fails at the first that is not ADD_OK.
func awaitResults(stream walpb.WAL_AddEntriesClient, n int64) error {
	for n > 0 {
		resp, err := stream.Recv()
		if err == io.EOF {
			return fmt.Errorf("store ended the stream with %d results missing", n)
		}
		if err != nil {
			return err
		}
		for _, r := range resp.Results {
			if r.Code != walpb.AddCode_ADD_OK {
				return fmt.Errorf("entry %d: %s %s", r.EntryId, r.Code, r.Message)
			}
			n--
		}
	}
	return nil
}

// ChangeEnsemble replaces the ensemble of the closed ledger m (as read,
// with its ModRevision) by next, in one compare-and-swap: every member of
// next must hold entries 0..LastEntry (CopyClosed onto each new one first).
// W becomes len(next); IntendedW and everything else stay. It fails with
// ErrEnsembleChanged if the record changed since m was read.
func ChangeEnsemble(ctx context.Context, cli *clientv3.Client, m Metadata, next []Member) (Metadata, error) {
	if m.State != StateClosed {
		return Metadata{}, fmt.Errorf("change ensemble of ledger %d: %w", m.ID, ErrNotClosed)
	}
	seen := make(map[string]bool, len(next))
	for _, member := range next {
		if seen[member.StoreID] {
			return Metadata{}, fmt.Errorf("%w: store %s twice in the ensemble", ErrBadConfig, member.StoreID)
		}
		seen[member.StoreID] = true
	}
	changed := m
	changed.Ensemble = append([]Member(nil), next...)
	changed.W = len(next)
	if changed.IntendedW == 0 {
		changed.IntendedW = m.W
	}
	now, swapped, err := casRecord(ctx, cli, m, changed)
	if err != nil {
		return Metadata{}, err
	}
	if !swapped {
		return now, ErrEnsembleChanged
	}
	return now, nil
}
