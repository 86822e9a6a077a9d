package ledger

// TEST DOUBLE. memStore is an in-memory walpb.WALServer with the semantics
// proto/wal.proto documents. It exists only so the ledger protocol could be
// exercised before the real store (ingest/wal) landed; the randomized and
// integration tests run against real ingest/wal stores when realStores is
// true (see harness_test.go).

import (
	"bytes"
	"context"
	"sync"

	"orderlog/proto/walpb"
)

type memLedger struct {
	entries []*walpb.AddEntry // dense from 0
	lac     int64
	fenced  bool
	closed  bool
	last    int64
}

type memStore struct {
	walpb.UnimplementedWALServer
	id          string
	incarnation uint64
	mu          struct {
		sync.Mutex
		ledgers map[uint64]*memLedger
	}
}

func newMemStore(id string, incarnation uint64) *memStore {
	s := &memStore{id: id, incarnation: incarnation}
	s.mu.ledgers = make(map[uint64]*memLedger)
	return s
}

func (s *memStore) ledgerLocked(id uint64) *memLedger {
	l, ok := s.mu.ledgers[id]
	if !ok {
		l = &memLedger{lac: -1, last: -1}
		s.mu.ledgers[id] = l
	}
	return l
}

func (s *memStore) add(e *walpb.AddEntry) *walpb.AddResult {
	res := &walpb.AddResult{RequestId: e.RequestId, LedgerId: e.LedgerId, EntryId: e.EntryId}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.StoreIncarnation != s.incarnation {
		res.Code = walpb.AddCode_ADD_WRONG_INCARNATION
		return res
	}
	l := s.ledgerLocked(e.LedgerId)
	switch {
	case l.closed && e.EntryId > l.last:
		res.Code = walpb.AddCode_ADD_BEYOND_CLOSE
	case (l.fenced || l.closed) && !e.Recovery:
		res.Code = walpb.AddCode_ADD_FENCED
	case e.EntryId < int64(len(l.entries)):
		old := l.entries[e.EntryId]
		if bytes.Equal(old.Payload, e.Payload) && old.Span.GetFirst() == e.Span.GetFirst() && old.Span.GetEnd() == e.Span.GetEnd() {
			res.Code = walpb.AddCode_ADD_OK
		} else {
			res.Code = walpb.AddCode_ADD_CONFLICT
		}
	case e.EntryId == int64(len(l.entries)):
		l.entries = append(l.entries, e)
		l.lac = max(l.lac, e.Lac)
		res.Code = walpb.AddCode_ADD_OK
	default:
		res.Code = walpb.AddCode_ADD_GAP
	}
	return res
}

func (s *memStore) AddEntries(stream walpb.WAL_AddEntriesServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		resp := &walpb.AddEntriesResponse{}
		for _, e := range req.Entries {
			resp.Results = append(resp.Results, s.add(e))
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func (s *memStore) read(req *walpb.ReadEntryRequest) *walpb.ReadEntryResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.StoreIncarnation != s.incarnation {
		return &walpb.ReadEntryResponse{Status: walpb.EntryStatus_UNKNOWN, EntryId: req.EntryId}
	}
	l := s.ledgerLocked(req.LedgerId)
	if req.EntryId < 0 || req.EntryId >= int64(len(l.entries)) {
		return &walpb.ReadEntryResponse{Status: walpb.EntryStatus_ABSENT, EntryId: req.EntryId, Lac: l.lac}
	}
	e := l.entries[req.EntryId]
	return &walpb.ReadEntryResponse{Status: walpb.EntryStatus_PRESENT, EntryId: e.EntryId, Span: e.Span, Lac: l.lac, Payload: e.Payload}
}

func (s *memStore) ReadEntry(_ context.Context, req *walpb.ReadEntryRequest) (*walpb.ReadEntryResponse, error) {
	return s.read(req), nil
}

func (s *memStore) ReadEntries(req *walpb.ReadEntriesRequest, stream walpb.WAL_ReadEntriesServer) error {
	for id := req.FirstEntry; id <= req.LastEntry; id++ {
		resp := s.read(&walpb.ReadEntryRequest{LedgerId: req.LedgerId, StoreIncarnation: req.StoreIncarnation, EntryId: id})
		if err := stream.Send(resp); err != nil || resp.Status != walpb.EntryStatus_PRESENT {
			return err
		}
	}
	return nil
}

func (s *memStore) Fence(_ context.Context, req *walpb.FenceRequest) (*walpb.FenceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.StoreIncarnation != s.incarnation {
		return &walpb.FenceResponse{Status: walpb.EntryStatus_UNKNOWN, LastEntry: -1, Lac: -1}, nil
	}
	l := s.ledgerLocked(req.LedgerId)
	l.fenced = true
	return &walpb.FenceResponse{Status: walpb.EntryStatus_PRESENT, LastEntry: int64(len(l.entries)) - 1, Lac: l.lac}, nil
}

func (s *memStore) LastEntry(_ context.Context, req *walpb.LastEntryRequest) (*walpb.LastEntryResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.StoreIncarnation != s.incarnation {
		return &walpb.LastEntryResponse{Status: walpb.EntryStatus_UNKNOWN}, nil
	}
	l := s.ledgerLocked(req.LedgerId)
	return &walpb.LastEntryResponse{Status: walpb.EntryStatus_PRESENT, LastEntry: int64(len(l.entries)) - 1, Lac: l.lac}, nil
}

func (s *memStore) CloseLedger(_ context.Context, req *walpb.CloseLedgerRequest) (*walpb.CloseLedgerResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.StoreIncarnation == s.incarnation {
		l := s.ledgerLocked(req.LedgerId)
		l.closed, l.last = true, req.LastEntry
		if int64(len(l.entries)) > req.LastEntry+1 {
			l.entries = l.entries[:req.LastEntry+1]
		}
	}
	return &walpb.CloseLedgerResponse{}, nil
}

func (s *memStore) Info(context.Context, *walpb.InfoRequest) (*walpb.InfoResponse, error) {
	return &walpb.InfoResponse{StoreId: s.id, Incarnation: s.incarnation}, nil
}
