package flightapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// fakeLog is a log of messages at the even offsets of [0, committed) (odd
// offsets are holes), served in pages of at most pageSize offsets, which
// end past a ticket's end when they can: DoGet must trim them.
type fakeLog struct {
	start, committed uint64
	pageSize         uint64
	files            []File
	queries          []*orderlogpb.QueryRequest
}

func (l *fakeLog) Query(_ context.Context, req *orderlogpb.QueryRequest) (*orderlogpb.ReadResponse, error) {
	l.queries = append(l.queries, req)
	page := &orderlogpb.ReadResponse{Committed: l.committed, NextOffset: min(req.FromOffset+l.pageSize, l.committed)}
	for o := req.FromOffset; o < page.NextOffset; o++ {
		if o%2 == 1 {
			page.Skipped = append(page.Skipped, &orderlogpb.SkippedRange{First: o, End: o + 1})
			continue
		}
		if req.Topic == "" || req.Topic == "even" {
			page.Messages = append(page.Messages, &orderlogpb.StoredMessage{Offset: o, IngestTimeUs: int64(o),
				Message: &orderlogpb.Message{Topic: "even", Key: req.Key, Value: []byte{byte(o)}}})
		}
	}
	return page, nil
}

func (l *fakeLog) Bounds() (uint64, uint64, error) { return l.start, l.committed, nil }

func (l *fakeLog) ArchivedFiles(first, end uint64) []File {
	var out []File
	for _, f := range l.files {
		if f.First >= first && f.End <= end {
			out = append(out, f)
		}
	}
	return out
}

func serveFlight(t *testing.T, source Source) flight.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	NewService(source).Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	c, err := flight.NewClientWithMiddleware(lis.Addr().String(), nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func cmdDescriptor(cmd string) *flight.FlightDescriptor {
	return &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: []byte(cmd)}
}

// The endpoints partition the range in order: files wholly inside it carry
// their object's location (for a command without a filter; a filtered one
// names the object in app_metadata only, as the object holds every row),
// the stretches between them and the files the range cuts are tickets only.
func TestFlightInfoPartitionsTheRangeAroundWholeFiles(t *testing.T) {
	log := &fakeLog{start: 10, committed: 100, pageSize: 7, files: []File{
		{First: 0, End: 20, URL: "s3://b/p/a.parquet"}, {First: 20, End: 40, URL: "s3://b/p/b.parquet"},
		{First: 40, End: 60, URL: "s3://b/p/c.parquet"}, {First: 60, End: 80, URL: "s3://b/p/d.parquet"},
	}}
	c := serveFlight(t, log)
	checkEndpoints(t, c, `{"first":15,"end":70}`, "",
		[]endpointPart{{15, 20, ""}, {20, 40, "s3://b/p/b.parquet"}, {40, 60, "s3://b/p/c.parquet"}, {60, 70, ""}})
	checkEndpoints(t, c, `{"first":15,"end":70,"topic":"even"}`, "even",
		[]endpointPart{{15, 20, ""}, {20, 40, ""}, {40, 60, ""}, {60, 70, ""}})

	// No bounds: from where reads start to C.
	info, err := c.GetFlightInfo(context.Background(), cmdDescriptor(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var meta map[string]uint64
	if err := json.Unmarshal(info.AppMetadata, &meta); err != nil || meta["first"] != 10 || meta["end"] != 100 || meta["committed"] != 100 {
		t.Fatalf("app_metadata %s (%v)", info.AppMetadata, err)
	}
}

// endpointPart is an endpoint's ticket range and its object location
// ("" if none).
type endpointPart struct {
	first, end uint64
	url        string
}

func checkEndpoints(t *testing.T, c flight.Client, cmd, topic string, want []endpointPart) {
	t.Helper()
	info, err := c.GetFlightInfo(context.Background(), cmdDescriptor(cmd))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Endpoint) != len(want) || !info.Ordered {
		t.Fatalf("%s: %d endpoints (ordered %v), want %d", cmd, len(info.Endpoint), info.Ordered, len(want))
	}
	for i, ep := range info.Endpoint {
		var tkt Command
		if err := json.Unmarshal(ep.Ticket.Ticket, &tkt); err != nil || tkt.First == nil || tkt.End == nil {
			t.Fatalf("%s: endpoint %d: ticket %s (%v)", cmd, i, ep.Ticket.Ticket, err)
		}
		got := endpointPart{*tkt.First, *tkt.End, ""}
		if len(ep.Location) > 0 {
			got.url = ep.Location[0].Uri
			if len(ep.Location) != 2 || ep.Location[1].Uri != flight.LocationReuseConnection {
				t.Errorf("%s: endpoint %d: locations %v", cmd, i, ep.Location)
			}
		}
		if got != want[i] || tkt.Topic != topic {
			t.Errorf("%s: endpoint %d: %+v topic %q, want %+v topic %q", cmd, i, got, tkt.Topic, want[i], topic)
		}
	}
}

func TestDoGetPagesThroughTheTicketsRangeAndTrimsItsEnd(t *testing.T) {
	log := &fakeLog{committed: 100, pageSize: 7}
	c := serveFlight(t, log)
	stream, err := c.DoGet(context.Background(), &flight.Ticket{Ticket: []byte(`{"first":3,"end":30,"key":"k"}`)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := flight.NewRecordReader(stream)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	var offsets []int64
	var holes [][2]uint64
	next := uint64(3)
	for r.Next() {
		rec := r.RecordBatch()
		offsets = append(offsets, rec.Column(0).(*array.Int64).Int64Values()...)
		var info struct {
			NextOffset uint64 `json:"next_offset"`
			Skipped    []struct{ First, End uint64 }
		}
		if err := json.Unmarshal(r.LatestAppMetadata(), &info); err != nil {
			t.Fatalf("app_metadata %s: %v", r.LatestAppMetadata(), err)
		}
		for _, s := range info.Skipped {
			holes = append(holes, [2]uint64{s.First, s.End})
		}
		next = info.NextOffset
	}
	if r.Err() != nil && !errors.Is(r.Err(), io.EOF) {
		t.Fatal(r.Err())
	}
	if next != 30 || len(offsets) != 13 || offsets[0] != 4 || offsets[12] != 28 || len(holes) != 14 || holes[13] != [2]uint64{29, 30} {
		t.Fatalf("next %d, offsets %v, holes %v", next, offsets, holes)
	}
	for _, q := range log.queries {
		if string(q.Key) != "k" || q.Limit != pageLimit {
			t.Fatalf("query %v", q)
		}
	}
}

func TestCommandsOutsideTheLogAreRefusedWithStableCodes(t *testing.T) {
	c := serveFlight(t, &fakeLog{start: 10, committed: 100, pageSize: 7})
	for cmd, want := range map[string]codes.Code{
		`{"first":5}`:                     codes.OutOfRange,
		`{"end":101}`:                     codes.OutOfRange,
		`{"first":50,"end":40}`:           codes.OutOfRange,
		`{"producer":3}`:                  codes.InvalidArgument,
		`{"key":"a","key_base64":"YQ=="}`: codes.InvalidArgument,
		`not json`:                        codes.InvalidArgument,
	} {
		_, err := c.GetFlightInfo(context.Background(), cmdDescriptor(cmd))
		if status.Code(err) != want {
			t.Errorf("%s: %v, want %v", cmd, err, want)
		}
	}
	_, err := c.GetFlightInfo(context.Background(), &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"x"}})
	if apierr.FromGRPC(err).Code != apierr.InvalidArgument {
		t.Errorf("a path descriptor: %v", err)
	}
	_, err = c.GetFlightInfo(context.Background(), cmdDescriptor(`{"first":5}`))
	if e := apierr.FromGRPC(err); e.Code != apierr.OffsetOutOfRange {
		t.Errorf("below the start: %v", err)
	}
}

// A ticket planned by a node further ahead, run on one that is behind, is
// UNAVAILABLE (retried), not a client error.
func TestATicketBeyondThisNodesCIsUnavailable(t *testing.T) {
	c := serveFlight(t, &fakeLog{committed: 100, pageSize: 7})
	stream, err := c.DoGet(context.Background(), &flight.Ticket{Ticket: []byte(`{"first":90,"end":120}`)})
	if err == nil {
		_, err = stream.Recv()
	}
	if e := apierr.FromGRPC(err); e.Code != apierr.Unavailable {
		t.Fatalf("a ticket ending beyond C: %v, want UNAVAILABLE", err)
	}
}
