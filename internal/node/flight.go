package node

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
	"orderlog/reader/flightapi"
)

// The Arrow Flight service (reader/flightapi) is served on the node's gRPC
// server beside orderlog's services, by every process with a reader: it
// reads through the same service as Query, and hands out the archive's
// files (when there is an archive) as locations a client reads itself.

// registerFlight adds the Flight service to the gRPC server; call it after
// the reader and the archive are set up, before the server serves.
func (s *Server) registerFlight() error {
	if s.reader == nil {
		return nil
	}
	base, err := archiveBaseURL(s.cfg.Archive.URL)
	if err != nil {
		return err
	}
	source := flightSource{server: s, query: newService(s.cli, s.ingest, s.reader, s.status), archiveBase: base}
	flightapi.NewService(source).Register(s.grpc)
	return nil
}

// flightSource is flightapi.Source over the node's reader and archive.
type flightSource struct {
	server *Server
	query  *service
	// archiveBase is the archive's URL that object keys are appended to
	// (a file:// URL made absolute), "" without an archive.
	archiveBase string
}

func (f flightSource) Query(ctx context.Context, req *orderlogpb.QueryRequest) (*orderlogpb.ReadResponse, error) {
	return f.query.Query(ctx, req)
}

func (f flightSource) Bounds() (uint64, uint64, error) {
	epoch, committed := f.server.reader.Commits().Committed()
	if epoch == 0 {
		return 0, 0, apierr.New(apierr.Unavailable, "the reader has not caught up with the sequencer's commit map yet")
	}
	return f.server.reader.ReadStart(), committed, nil
}

func (f flightSource) ArchivedFiles(first, end uint64) []flightapi.File {
	if f.server.archive == nil || f.archiveBase == "" {
		return nil
	}
	var out []flightapi.File
	for _, e := range f.server.archive.FilesWithin(first, end) {
		out = append(out, flightapi.File{First: e.First, End: e.End, URL: f.archiveBase + "/" + e.Object, Rows: e.Rows, Bytes: e.Bytes})
	}
	return out
}

// archiveBaseURL is the URL object keys are appended to: file://PATH made
// absolute (file:///abs/path), s3://BUCKET/PREFIX as given; "" for none.
func archiveBaseURL(archive string) (string, error) {
	switch {
	case archive == "":
		return "", nil
	case strings.HasPrefix(archive, "file://"):
		dir, err := filepath.Abs(strings.TrimPrefix(archive, "file://"))
		if err != nil {
			return "", err
		}
		return (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String(), nil
	}
	return strings.TrimSuffix(archive, "/"), nil
}
