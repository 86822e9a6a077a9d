package wal

import (
	"context"
	"errors"
	"io"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"orderlog/proto/walpb"
)

// Service is the gRPC face of a Store (proto/wal.proto). Every request names
// a store incarnation; one that is not the store's current incarnation is
// answered UNKNOWN (reads, last entry, fence) or ADD_WRONG_INCARNATION
// (appends), never ABSENT.
type Service struct {
	walpb.UnimplementedWALServer
	store *Store
	// local: the appends come from this process's own writers
	// (LocalClient), which the disk's hard mark lets finish what they have
	// in flight; everyone else's are refused above it.
	local bool
}

// NewService serves store. The caller keeps ownership of the store.
func NewService(store *Store) *Service { return &Service{store: store} }

// Serve registers a Service for store on a new gRPC server, with the
// grpc.health.v1 health service (SERVING) and server reflection, and serves
// lis in the background. Stop the returned server before closing the store.
func Serve(lis net.Listener, store *Store, opts ...grpc.ServerOption) *grpc.Server {
	srv := grpc.NewServer(opts...)
	walpb.RegisterWALServer(srv, NewService(store))
	serving := health.NewServer() // "" is SERVING from the start
	serving.SetServingStatus(walpb.WAL_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, serving)
	reflection.Register(srv)
	go srv.Serve(lis)
	return srv
}

// maxResultsPerFrame bounds one AddEntriesResponse.
const maxResultsPerFrame = 1024

type queuedResult struct {
	result *walpb.AddResult
	ticket *Ticket
}

// AddEntries appends the stream's entries in order. Each result is sent only
// after the fsync covering its entry (or with its error); results keep the
// order of the entries and several may share a frame.
func (svc *Service) AddEntries(stream grpc.BidiStreamingServer[walpb.AddEntriesRequest, walpb.AddEntriesResponse]) error {
	queue := make(chan queuedResult, 4*maxResultsPerFrame)
	sendDone := make(chan error, 1)
	go func() { sendDone <- sendResults(stream, queue) }()
	var recvErr error
	for {
		req, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				recvErr = err
			}
			break
		}
		for _, e := range req.Entries {
			queue <- svc.startAdd(e)
		}
	}
	close(queue)
	sendErr := <-sendDone
	if recvErr != nil {
		return recvErr
	}
	return sendErr
}

func (svc *Service) startAdd(e *walpb.AddEntry) queuedResult {
	res := &walpb.AddResult{RequestId: e.RequestId, LedgerId: e.LedgerId, EntryId: e.EntryId}
	if e.StoreIncarnation != svc.store.Incarnation() {
		res.Code, res.Message = walpb.AddCode_ADD_WRONG_INCARNATION, "store incarnation mismatch"
		return queuedResult{result: res, ticket: &Ticket{}}
	}
	entry := Entry{Ledger: e.LedgerId, ID: e.EntryId, LAC: e.Lac, Payload: e.Payload}
	if e.Span != nil {
		entry.Span = Span{First: e.Span.First, End: e.Span.End}
	}
	return queuedResult{result: res, ticket: svc.store.appendAsync(entry, e.Recovery, !svc.local)}
}

// sendResults sends results in queue order, each once its ticket is done,
// batching those already done into one frame. After a send error it keeps
// draining so the receiver never blocks.
func sendResults(stream grpc.BidiStreamingServer[walpb.AddEntriesRequest, walpb.AddEntriesResponse], queue <-chan queuedResult) error {
	var frame []*walpb.AddResult
	var sendErr error
	flush := func() {
		if len(frame) > 0 && sendErr == nil {
			sendErr = stream.Send(&walpb.AddEntriesResponse{Results: frame})
		}
		frame = nil
	}
	for {
		var q queuedResult
		var ok bool
		if len(frame) == 0 {
			q, ok = <-queue
		} else {
			select {
			case q, ok = <-queue:
			default:
				flush()
				continue
			}
		}
		if !ok {
			flush()
			return sendErr
		}
		select {
		case <-q.ticket.Done():
		default:
			flush()
			<-q.ticket.Done()
		}
		if q.result.Code == walpb.AddCode_ADD_CODE_UNSPECIFIED {
			err := q.ticket.Wait()
			q.result.Code = addCode(err)
			if err != nil {
				q.result.Message = err.Error()
			}
		}
		frame = append(frame, q.result)
		if len(frame) >= maxResultsPerFrame {
			flush()
		}
	}
}

// addCode maps an append outcome to its wire code.
func addCode(err error) walpb.AddCode {
	var gap *GapError
	var conflict *ConflictError
	switch {
	case err == nil:
		return walpb.AddCode_ADD_OK
	case errors.Is(err, ErrFenced), errors.Is(err, ErrLedgerDeleted):
		return walpb.AddCode_ADD_FENCED
	case errors.Is(err, ErrBeyondClose):
		return walpb.AddCode_ADD_BEYOND_CLOSE
	case errors.Is(err, ErrDamaged):
		return walpb.AddCode_ADD_DAMAGED
	case errors.As(err, &gap), errors.Is(err, ErrInvalidEntry):
		return walpb.AddCode_ADD_GAP
	case errors.As(err, &conflict):
		return walpb.AddCode_ADD_CONFLICT
	default: // ErrDiskFull too: the writer resends later, as to a store that restarts
		return walpb.AddCode_ADD_STORE_FAILED
	}
}

// grpcError maps store errors to gRPC status codes for the unary calls.
func grpcError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrStoreFailed), errors.Is(err, ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, ErrLedgerDeleted):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, ErrInvalidEntry):
		return status.Error(codes.InvalidArgument, err.Error())
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

func statusProto(st Status) walpb.EntryStatus {
	switch st {
	case Present:
		return walpb.EntryStatus_PRESENT
	case Absent:
		return walpb.EntryStatus_ABSENT
	default:
		return walpb.EntryStatus_UNKNOWN
	}
}

func (svc *Service) readResponse(incarnation, ledger uint64, entry int64) *walpb.ReadEntryResponse {
	resp := &walpb.ReadEntryResponse{EntryId: entry, Status: walpb.EntryStatus_UNKNOWN}
	if incarnation != svc.store.Incarnation() {
		resp.Message = "store incarnation mismatch"
		return resp
	}
	r := svc.store.Read(ledger, entry)
	resp.Status = statusProto(r.Status)
	if r.Err != nil {
		resp.Message = r.Err.Error()
	}
	if r.Status == Present {
		resp.Span = &walpb.Span{First: r.Span.First, End: r.Span.End}
		resp.Lac = r.LAC
		resp.Payload = r.Payload
	}
	return resp
}

func (svc *Service) ReadEntry(_ context.Context, req *walpb.ReadEntryRequest) (*walpb.ReadEntryResponse, error) {
	return svc.readResponse(req.StoreIncarnation, req.LedgerId, req.EntryId), nil
}

func (svc *Service) ReadEntries(req *walpb.ReadEntriesRequest, stream grpc.ServerStreamingServer[walpb.ReadEntryResponse]) error {
	for e := req.FirstEntry; e <= req.LastEntry; e++ {
		resp := svc.readResponse(req.StoreIncarnation, req.LedgerId, e)
		if err := stream.Send(resp); err != nil {
			return err
		}
		if resp.Status != walpb.EntryStatus_PRESENT {
			return nil
		}
	}
	return nil
}

func (svc *Service) LastEntry(_ context.Context, req *walpb.LastEntryRequest) (*walpb.LastEntryResponse, error) {
	if req.StoreIncarnation != svc.store.Incarnation() {
		return &walpb.LastEntryResponse{Status: walpb.EntryStatus_UNKNOWN, LastEntry: -1, Lac: -1}, nil
	}
	st := svc.store.LastEntry(req.LedgerId)
	return &walpb.LastEntryResponse{Status: statusProto(st.Status), LastEntry: st.Last, Lac: st.LAC}, nil
}

// Fence fences even when the incarnation differs: the ledger must not take
// more appends here either way; the answer is then UNKNOWN.
func (svc *Service) Fence(_ context.Context, req *walpb.FenceRequest) (*walpb.FenceResponse, error) {
	st, err := svc.store.Fence(req.LedgerId)
	if err != nil {
		return nil, grpcError(err)
	}
	resp := &walpb.FenceResponse{Status: statusProto(st.Status), LastEntry: st.Last, Lac: st.LAC}
	if req.StoreIncarnation != svc.store.Incarnation() {
		resp.Status = walpb.EntryStatus_UNKNOWN
	}
	return resp, nil
}

// CloseLedger applies whatever the incarnation: dropping entries beyond a
// ledger's decided last entry is right in every incarnation.
func (svc *Service) CloseLedger(_ context.Context, req *walpb.CloseLedgerRequest) (*walpb.CloseLedgerResponse, error) {
	if err := svc.store.CloseLedger(req.LedgerId, req.LastEntry); err != nil {
		return nil, grpcError(err)
	}
	return &walpb.CloseLedgerResponse{}, nil
}

func (svc *Service) DeleteLedger(_ context.Context, req *walpb.DeleteLedgerRequest) (*walpb.DeleteLedgerResponse, error) {
	if err := svc.store.Delete(req.LedgerId); err != nil {
		return nil, grpcError(err)
	}
	return &walpb.DeleteLedgerResponse{}, nil
}

func (svc *Service) Info(context.Context, *walpb.InfoRequest) (*walpb.InfoResponse, error) {
	return &walpb.InfoResponse{StoreId: svc.store.StoreID(), Incarnation: svc.store.Incarnation(), Ledgers: svc.store.Ledgers()}, nil
}
