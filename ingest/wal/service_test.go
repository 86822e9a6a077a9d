package wal

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"orderlog/ingest/wal/walfs"
	"orderlog/proto/walpb"
)

// serveFunc serves s and returns a client of it.
type serveFunc func(t *testing.T, s *Store) walpb.WALClient

// forEachTransport runs a service test over gRPC and over the in-process
// LocalClient: both must give the same answers.
func forEachTransport(t *testing.T, test func(*testing.T, serveFunc)) {
	t.Run("grpc", func(t *testing.T) { test(t, serveTest) })
	t.Run("local", func(t *testing.T) {
		test(t, func(t *testing.T, s *Store) walpb.WALClient { return NewLocalClient(NewService(s)) })
	})
}

// serveTest serves s on a loopback port and returns a client.
func serveTest(t *testing.T, s *Store) walpb.WALClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Serve(lis, s)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return walpb.NewWALClient(conn)
}

func addEntry(inc uint64, ledger uint64, entry int64) *walpb.AddEntry {
	e := entryFor(ledger, entry)
	return &walpb.AddEntry{LedgerId: ledger, StoreIncarnation: inc, EntryId: entry,
		Span: &walpb.Span{First: e.Span.First, End: e.Span.End}, Lac: e.LAC, Payload: e.Payload,
		RequestId: uint64(entry) + 1000}
}

func TestServiceAddReadFenceClose(t *testing.T) { forEachTransport(t, testServiceAddReadFenceClose) }

func testServiceAddReadFenceClose(t *testing.T, serve serveFunc) {
	s := openMem(t, walfs.NewCrashFS(1), func(c *Config) { c.SegmentSize = 1 << 20 })
	defer s.Close()
	client := serve(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inc := s.Incarnation()

	stream, err := client.AddEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	go func() {
		for e := int64(0); e < n; e += 50 {
			var frame []*walpb.AddEntry
			for i := e; i < e+50; i++ {
				frame = append(frame, addEntry(inc, 5, i))
			}
			if err := stream.Send(&walpb.AddEntriesRequest{Entries: frame}); err != nil {
				t.Errorf("send: %v", err)
				return
			}
		}
		stream.Send(&walpb.AddEntriesRequest{Entries: []*walpb.AddEntry{addEntry(inc+1, 5, n), addEntry(inc, 5, n+3)}})
		stream.CloseSend()
	}()
	var results []*walpb.AddResult
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, resp.Results...)
	}
	if len(results) != n+2 {
		t.Fatalf("got %d results, want %d", len(results), n+2)
	}
	for i, r := range results[:n] {
		if r.EntryId != int64(i) || r.Code != walpb.AddCode_ADD_OK || r.RequestId != uint64(i)+1000 || r.LedgerId != 5 {
			t.Fatalf("result %d = %v", i, r)
		}
	}
	if c := results[n].Code; c != walpb.AddCode_ADD_WRONG_INCARNATION {
		t.Fatalf("wrong incarnation append: %v", c)
	}
	if c := results[n+1].Code; c != walpb.AddCode_ADD_GAP {
		t.Fatalf("gap append: %v", c)
	}

	rd, err := client.ReadEntry(ctx, &walpb.ReadEntryRequest{LedgerId: 5, StoreIncarnation: inc, EntryId: 7})
	if err != nil || rd.Status != walpb.EntryStatus_PRESENT || !bytes.Equal(rd.Payload, payloadFor(5, 7)) || rd.Span.First != 70 || rd.Lac != 6 {
		t.Fatalf("read = %v, %v", rd, err)
	}
	rd, _ = client.ReadEntry(ctx, &walpb.ReadEntryRequest{LedgerId: 5, StoreIncarnation: inc, EntryId: n})
	if rd.Status != walpb.EntryStatus_ABSENT {
		t.Fatalf("read beyond last = %v", rd.Status)
	}
	rd, _ = client.ReadEntry(ctx, &walpb.ReadEntryRequest{LedgerId: 5, StoreIncarnation: inc + 1, EntryId: n})
	if rd.Status != walpb.EntryStatus_UNKNOWN {
		t.Fatalf("read naming another incarnation = %v, want UNKNOWN", rd.Status)
	}
	le, _ := client.LastEntry(ctx, &walpb.LastEntryRequest{LedgerId: 5, StoreIncarnation: inc})
	if le.Status != walpb.EntryStatus_PRESENT || le.LastEntry != n-1 || le.Lac != n-2 {
		t.Fatalf("last entry = %v", le)
	}
	le, _ = client.LastEntry(ctx, &walpb.LastEntryRequest{LedgerId: 5, StoreIncarnation: inc - 1})
	if le.Status != walpb.EntryStatus_UNKNOWN {
		t.Fatalf("last entry naming another incarnation = %v", le)
	}

	rs, err := client.ReadEntries(ctx, &walpb.ReadEntriesRequest{LedgerId: 5, StoreIncarnation: inc, FirstEntry: n - 3, LastEntry: n + 5})
	if err != nil {
		t.Fatal(err)
	}
	var statuses []walpb.EntryStatus
	for {
		r, err := rs.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, r.Status)
	}
	if len(statuses) != 4 || statuses[3] != walpb.EntryStatus_ABSENT {
		t.Fatalf("read entries statuses = %v", statuses)
	}

	fr, err := client.Fence(ctx, &walpb.FenceRequest{LedgerId: 5, StoreIncarnation: inc})
	if err != nil || fr.Status != walpb.EntryStatus_PRESENT || fr.LastEntry != n-1 || fr.Lac != n-2 {
		t.Fatalf("fence = %v, %v", fr, err)
	}
	stream, _ = client.AddEntries(ctx)
	stream.Send(&walpb.AddEntriesRequest{Entries: []*walpb.AddEntry{addEntry(inc, 5, n)}})
	resp, err := stream.Recv()
	if err != nil || resp.Results[0].Code != walpb.AddCode_ADD_FENCED {
		t.Fatalf("append after fence = %v, %v", resp, err)
	}
	rec := addEntry(inc, 5, n)
	rec.Recovery = true
	stream.Send(&walpb.AddEntriesRequest{Entries: []*walpb.AddEntry{rec}})
	resp, err = stream.Recv()
	if err != nil || resp.Results[0].Code != walpb.AddCode_ADD_OK {
		t.Fatalf("recovery append after fence = %v, %v", resp, err)
	}
	stream.CloseSend()

	if _, err := client.CloseLedger(ctx, &walpb.CloseLedgerRequest{LedgerId: 5, StoreIncarnation: inc, LastEntry: 10}); err != nil {
		t.Fatal(err)
	}
	rd, _ = client.ReadEntry(ctx, &walpb.ReadEntryRequest{LedgerId: 5, StoreIncarnation: inc, EntryId: 11})
	if rd.Status != walpb.EntryStatus_ABSENT {
		t.Fatalf("read beyond close = %v", rd.Status)
	}
	info, err := client.Info(ctx, &walpb.InfoRequest{})
	if err != nil || info.Incarnation != inc || info.StoreId != s.StoreID() || len(info.Ledgers) != 1 {
		t.Fatalf("info = %v, %v", info, err)
	}
	if _, err := client.DeleteLedger(ctx, &walpb.DeleteLedgerRequest{LedgerId: 5}); err != nil {
		t.Fatal(err)
	}
	rd, _ = client.ReadEntry(ctx, &walpb.ReadEntryRequest{LedgerId: 5, StoreIncarnation: inc, EntryId: 1})
	if rd.Status != walpb.EntryStatus_UNKNOWN {
		t.Fatalf("read of deleted ledger = %v", rd.Status)
	}
}

// TestServiceResultsWaitForFsync holds the fdatasync and checks that no
// result is sent until it completes.
func TestServiceResultsWaitForFsync(t *testing.T) {
	forEachTransport(t, testServiceResultsWaitForFsync)
}

func testServiceResultsWaitForFsync(t *testing.T, serve serveFunc) {
	fsys := walfs.NewCrashFS(1)
	s := openMem(t, fsys, nil)
	defer s.Close()
	client := serve(t, s)
	release := make(chan struct{})
	syncStarted := make(chan struct{})
	var blocked atomic.Bool
	blocked.Store(true)
	fsys.SetInject(func(op walfs.Op, name string) error {
		if op == walfs.OpSync && blocked.CompareAndSwap(true, false) {
			close(syncStarted)
			<-release
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := client.AddEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&walpb.AddEntriesRequest{Entries: []*walpb.AddEntry{addEntry(s.Incarnation(), 1, 0)}}); err != nil {
		t.Fatal(err)
	}
	got := make(chan *walpb.AddEntriesResponse, 1)
	go func() {
		resp, err := stream.Recv()
		if err != nil {
			t.Errorf("recv: %v", err)
		}
		got <- resp
	}()
	<-syncStarted
	// The entry is written and its fdatasync is held: an implementation that
	// answered after the write would answer now.
	if st := s.Read(1, 0).Status; st != Unknown {
		t.Fatalf("entry not yet durable reads %v, want UNKNOWN", st)
	}
	select {
	case resp := <-got:
		t.Fatalf("result sent before the fsync completed: %v", resp)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	resp := <-got
	if resp.Results[0].Code != walpb.AddCode_ADD_OK {
		t.Fatalf("result = %v", resp)
	}
	expectPresent(t, s, 1, 0)
}

// TestServiceConcurrentStreams runs several AddEntries streams, readers and
// fences at once (meaningful under -race): each stream's results arrive
// complete and in order, and what was acknowledged reads back.
func TestServiceConcurrentStreams(t *testing.T) { forEachTransport(t, testServiceConcurrentStreams) }

func testServiceConcurrentStreams(t *testing.T, serve serveFunc) {
	s := openMem(t, walfs.NewCrashFS(1), func(c *Config) { c.SegmentSize = 64 << 10 })
	defer s.Close()
	client := serve(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inc := s.Incarnation()
	const streams, perStream = 6, 150
	var wg sync.WaitGroup
	for w := range streams {
		ledger := uint64(w + 1)
		wg.Add(2)
		go func() {
			defer wg.Done()
			stream, err := client.AddEntries(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			go func() {
				for e := int64(0); e < perStream; e++ {
					if err := stream.Send(&walpb.AddEntriesRequest{Entries: []*walpb.AddEntry{addEntry(inc, ledger, e)}}); err != nil {
						return
					}
				}
				stream.CloseSend()
			}()
			next := int64(0)
			for {
				resp, err := stream.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Error(err)
					return
				}
				for _, r := range resp.Results {
					if r.EntryId != next || r.Code != walpb.AddCode_ADD_OK {
						t.Errorf("ledger %d: result %v, want entry %d OK", ledger, r, next)
						return
					}
					next++
				}
			}
			if next != perStream {
				t.Errorf("ledger %d: %d results", ledger, next)
			}
		}()
		go func() { // a concurrent reader of the same ledger
			defer wg.Done()
			for e := int64(0); e < perStream; e += 7 {
				r, err := client.ReadEntry(ctx, &walpb.ReadEntryRequest{LedgerId: ledger, StoreIncarnation: inc, EntryId: e})
				if err != nil {
					t.Error(err)
					return
				}
				if r.Status == walpb.EntryStatus_PRESENT && !bytes.Equal(r.Payload, payloadFor(ledger, e)) {
					t.Errorf("ledger %d entry %d: wrong bytes", ledger, e)
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // fences of other ledgers interleave with the appends
		defer wg.Done()
		for l := uint64(100); l < 110; l++ {
			if _, err := client.Fence(ctx, &walpb.FenceRequest{LedgerId: l, StoreIncarnation: inc}); err != nil {
				t.Error(err)
			}
		}
	}()
	wg.Wait()
	for w := range streams {
		for e := int64(0); e < perStream; e++ {
			expectPresent(t, s, uint64(w+1), e)
		}
	}
}

// A cancelled in-process stream ends both ends like a gRPC stream: Recv
// reports Canceled and the handler returns.
func TestLocalStreamCancel(t *testing.T) {
	s := openMem(t, walfs.NewCrashFS(1), nil)
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := NewLocalClient(NewService(s)).AddEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&walpb.AddEntriesRequest{Entries: []*walpb.AddEntry{addEntry(s.Incarnation(), 1, 0)}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil || len(resp.Results) != 1 || resp.Results[0].Code != walpb.AddCode_ADD_OK {
		t.Fatalf("first result %v, %v", resp, err)
	}
	cancel()
	if _, err := stream.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("Recv after cancel: %v", err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&walpb.AddEntriesRequest{}); err == nil {
		t.Fatal("Send after CloseSend succeeded")
	}
}
