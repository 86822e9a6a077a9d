package flightapi

import (
	"context"
	"encoding/json"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"

	"orderlog/internal/apierr"
	"orderlog/internal/arrowpage"
	"orderlog/proto/orderlogpb"
	"orderlog/reader"
	"orderlog/tiering/parquetfile"
)

// Source is what the service reads through: the node's reader and its
// view of the archive.
type Source interface {
	// Query returns one page of a read, as the Query RPC does: messages
	// below C from req.FromOffset on, holes as skipped ranges.
	Query(ctx context.Context, req *orderlogpb.QueryRequest) (*orderlogpb.ReadResponse, error)
	// Bounds returns the first offset a read may start at and the
	// committed watermark C, or UNAVAILABLE before the reader caught up.
	Bounds() (start, committed uint64, err error)
	// ArchivedFiles returns the archive's published files wholly inside
	// [first, end), in offset order; none without an archive.
	ArchivedFiles(first, end uint64) []File
}

// File is one published archive file.
type File struct {
	First, End uint64 // its range [First, End)
	// URL is where a client reads the object itself: file:///PATH or
	// s3://BUCKET/KEY.
	URL   string
	Rows  int64
	Bytes int64
}

// pageLimit bounds the messages of one page, so one record batch, of a
// DoGet (the reader's page bounds, 4 MiB and 1,024 entries, still apply).
const pageLimit = 10_000

// Service is the Flight service over a Source. GetFlightInfo, GetSchema
// and DoGet are served; every other method answers Unimplemented.
type Service struct {
	flight.BaseFlightServer
	source Source
	schema []byte // the archive's schema, serialized as Flight sends it
}

// NewService returns the Flight service.
func NewService(source Source) *Service {
	return &Service{source: source, schema: flight.SerializeSchema(parquetfile.ArrowSchema(), memory.DefaultAllocator)}
}

// Register adds the service to a gRPC server.
func (s *Service) Register(srv *grpc.Server) { flight.RegisterFlightServiceServer(srv, s) }

// GetSchema answers the archive's schema for any command.
func (s *Service) GetSchema(_ context.Context, desc *flight.FlightDescriptor) (*flight.SchemaResult, error) {
	if _, err := commandOf(desc); err != nil {
		return nil, err
	}
	return &flight.SchemaResult{Schema: s.schema}, nil
}

// GetFlightInfo decides the command's range and plans its endpoints.
func (s *Service) GetFlightInfo(_ context.Context, desc *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	cmd, err := commandOf(desc)
	if err != nil {
		return nil, err
	}
	start, committed, err := s.source.Bounds()
	if err != nil {
		return nil, err
	}
	sp, err := cmd.decide(start, committed, false)
	if err != nil {
		return nil, err
	}
	meta, _ := json.Marshal(map[string]uint64{"first": sp.first, "end": sp.end, "committed": committed})
	return &flight.FlightInfo{
		Schema:           s.schema,
		FlightDescriptor: desc,
		Endpoint:         plan(sp, s.source.ArchivedFiles(sp.first, sp.end)),
		TotalRecords:     -1,
		TotalBytes:       -1,
		Ordered:          true,
		AppMetadata:      meta,
	}, nil
}

func commandOf(desc *flight.FlightDescriptor) (Command, error) {
	if desc.GetType() != flight.DescriptorCMD {
		return Command{}, apierr.New(apierr.InvalidArgument, "orderlog's Flight service takes descriptors of type CMD (a JSON command), not %v", desc.GetType())
	}
	return decodeCommand(desc.GetCmd())
}

// plan partitions the span into endpoints in offset order: one per file
// (the files are inside the span, in order), one per stretch between them.
func plan(sp span, files []File) []*flight.FlightEndpoint {
	var out []*flight.FlightEndpoint
	cursor := sp.first
	for _, f := range files {
		if f.First > cursor {
			out = append(out, hotEndpoint(sp.sub(cursor, f.First)))
		}
		out = append(out, fileEndpoint(sp.sub(f.First, f.End), f))
		cursor = f.End
	}
	if cursor < sp.end {
		out = append(out, hotEndpoint(sp.sub(cursor, sp.end)))
	}
	return out
}

// hotEndpoint is a part read through this service only.
func hotEndpoint(sp span) *flight.FlightEndpoint {
	meta, _ := json.Marshal(map[string]uint64{"first": sp.first, "end": sp.end})
	return &flight.FlightEndpoint{Ticket: &flight.Ticket{Ticket: sp.ticket()}, AppMetadata: meta}
}

// fileEndpoint is an archived file: the ticket here, and the object as a
// location when the command selects every message, since every location
// of an endpoint must serve the same rows and the object holds them all.
// A filtered command names the object in app_metadata only.
func fileEndpoint(sp span, f File) *flight.FlightEndpoint {
	meta, _ := json.Marshal(map[string]any{"first": f.First, "end": f.End, "rows": f.Rows, "bytes": f.Bytes, "format": "parquet",
		"object": f.URL})
	e := &flight.FlightEndpoint{Ticket: &flight.Ticket{Ticket: sp.ticket()}, AppMetadata: meta}
	if sp.selectsAll() {
		e.Location = []*flight.Location{{Uri: f.URL}, {Uri: flight.LocationReuseConnection}}
	}
	return e
}

// DoGet streams a ticket's range: a record batch per page with its paging
// in app_metadata. A command without bounds is served too (its bounds
// decided as GetFlightInfo would).
func (s *Service) DoGet(tkt *flight.Ticket, stream flight.FlightService_DoGetServer) error {
	cmd, err := decodeCommand(tkt.GetTicket())
	if err != nil {
		return err
	}
	start, committed, err := s.source.Bounds()
	if err != nil {
		return err
	}
	sp, err := cmd.decide(start, committed, true)
	if err != nil {
		return err
	}
	w := flight.NewRecordWriter(stream, ipc.WithSchema(parquetfile.ArrowSchema()), ipc.WithAllocator(memory.DefaultAllocator))
	if err := s.stream(stream.Context(), sp, w); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// stream writes the span's pages, trimmed to its end.
func (s *Service) stream(ctx context.Context, sp span, w *flight.Writer) error {
	for from := sp.first; from < sp.end; {
		page, err := s.source.Query(ctx, sp.query(from, pageLimit))
		if err != nil {
			return err
		}
		reader.TrimToEnd(page, sp.end)
		if len(page.Messages) > 0 || len(page.Skipped) > 0 {
			if err := writePage(w, page); err != nil {
				return err
			}
		}
		if page.NextOffset <= from {
			return apierr.New(apierr.Internal, "flightapi: the read made no progress at offset %d", from)
		}
		from = page.NextOffset
	}
	return nil
}

func writePage(w *flight.Writer, page *orderlogpb.ReadResponse) error {
	rec, err := arrowpage.Record(page)
	if err != nil {
		return apierr.New(apierr.Internal, "%v", err)
	}
	defer rec.Release()
	return w.WriteWithAppMetadata(rec, arrowpage.AppMetadata(page))
}
