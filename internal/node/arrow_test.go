package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/ingest/httpapi"
	"orderlog/ingest/retention"
	"orderlog/internal/arrowpage"
	"orderlog/proto/orderlogpb"
	"orderlog/tiering"
	"orderlog/tiering/parquetfile"
)

// archivedNode is a node whose log is partly archived and deleted below
// the log start S, partly hot: T, the archived watermark, is below C and
// stays there (files are cut by size only, and what lies above T is less
// than a file).
type archivedNode struct {
	s          *Server
	c          *client.Client
	archiveDir string
	t, c0      uint64 // T and C once settled
}

const arrowTestFileBytes = 24 << 10

func startArchivedNode(t *testing.T, ctx context.Context) *archivedNode {
	t.Helper()
	dir := t.TempDir()
	n := &archivedNode{archiveDir: filepath.Join(dir, "archive")}
	cfg := Config{DataDir: dir, Ingest: ingest.Config{RollBytes: 16 << 10}, SegmentSize: 128 << 10,
		Retention: RetentionConfig{Policy: retention.Policy{Bytes: 32 << 10}, Interval: 50 * time.Millisecond, DeleteGrace: -1},
		Archive: ArchiveConfig{URL: "file://" + n.archiveDir, FileBytes: arrowTestFileBytes, FileAge: time.Hour,
			HotWindow: time.Millisecond, Interval: 50 * time.Millisecond}}
	n.s = startServerWith(t, cfg)
	t.Cleanup(n.s.Close)
	n.c = dial(t, n.s)
	p, err := n.c.NewProducer(ctx, "arrow", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var last uint64
	for i := range 300 {
		frame := []*orderlogpb.Message{
			{Topic: "orders", Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, "order %d %0400d", i, i),
				Headers:      []*orderlogpb.Header{{Key: "h", Value: []byte("1")}, {Key: "h", Value: nil}, {Key: "bin", Value: []byte{0xff, 0}}},
				ClientTimeUs: int64(1000 + i)},
			{Topic: "clicks", Value: []byte{0xfe, byte(i)}, MessageId: fmt.Appendf(nil, "m%d", i)},
		}
		acks, err := p.Produce(ctx, frame...)
		if err != nil {
			t.Fatal(err)
		}
		last = acks[len(acks)-1].Offset
	}
	waitCommitted(t, n.c, last+1)
	n.settle(t, ctx, p)
	return n
}

// settle waits until T is final below C: at least one file below the log
// start, and less than a file's bytes above T (so no file can be cut any
// more), with at least one message there.
func (n *archivedNode) settle(t *testing.T, ctx context.Context, p *client.Producer) {
	t.Helper()
	waitUntil(t, 60*time.Second, "the log archived, its ledgers deleted and T settled", func() bool {
		head, err := tiering.ReadHead(ctx, n.s.cli)
		if err != nil || head.T == 0 || n.s.reader.LogStart() == 0 {
			return false
		}
		_, committed := n.s.reader.Commits().Committed()
		if head.T == committed { // nothing above T: one more message makes a file that is never full
			acks, err := p.Produce(ctx, &orderlogpb.Message{Topic: "clicks", Value: []byte("tail")})
			if err != nil {
				t.Fatal(err)
			}
			waitCommitted(t, n.c, acks[0].Offset+1)
			return false
		}
		above := 0
		for _, m := range readRange(t, ctx, n.c, head.T, nil).messages {
			above += proto.Size(m)
		}
		n.t, n.c0 = head.T, committed
		_, loaded := n.s.archive.Archived() // the node's manifest reaches T
		return above < arrowTestFileBytes && loaded == head.T
	})
}

// An Arrow read over HTTP of the whole log, archived messages and hot ones,
// gives every column of every message the gRPC read gives, and the same
// holes; each page's paging is in its headers and its schema metadata
// alike, and equals the JSON read's.
func TestHTTPArrowReadSpansTheArchiveAndTheHotLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := startArchivedNode(t, ctx)
	want := readRange(t, ctx, n.c, 0, nil)

	var got logRead
	pages := 0
	for from := uint64(0); from < n.c0; pages++ {
		page := getArrowPage(t, n.s, from)
		got.messages = append(got.messages, page.messages...)
		for _, s := range page.skipped {
			got.skipped = appendMerged(got.skipped, s)
		}
		if page.nextOffset <= from {
			t.Fatalf("no progress at %d", from)
		}
		from = page.nextOffset
	}
	if err := sameRead(want, got); err != nil {
		t.Fatalf("the Arrow read differs from the gRPC read: %v", err)
	}
	if first, last := got.messages[0].Offset, got.messages[len(got.messages)-1].Offset; first >= n.s.reader.LogStart() || last < n.t {
		t.Fatalf("%d pages of offsets %d to %d, log start %d, T %d: want archived messages and hot ones", pages, first, last, n.s.reader.LogStart(), n.t)
	}

	// A hot page: the JSON read's paging and the Arrow one's are the same.
	arrowPage := getArrowPage(t, n.s, n.t)
	resp, err := http.Get("http://" + n.s.HTTPAddr() + "/v1/messages?limit=10000&offset=" + strconv.FormatUint(n.t, 10))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var jsonPage struct {
		Messages   []json.RawMessage `json:"messages"`
		NextOffset uint64            `json:"next_offset"`
		Committed  uint64            `json:"committed"`
		Skipped    json.RawMessage   `json:"skipped"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsonPage); err != nil {
		t.Fatal(err)
	}
	if jsonPage.NextOffset != arrowPage.nextOffset || jsonPage.Committed != arrowPage.committed ||
		string(jsonPage.Skipped) != arrowPage.skippedJSON || len(jsonPage.Messages) != len(arrowPage.messages) {
		t.Fatalf("JSON page: next %d, committed %d, skipped %s, %d messages; Arrow: %d, %d, %s, %d", jsonPage.NextOffset, jsonPage.Committed,
			jsonPage.Skipped, len(jsonPage.Messages), arrowPage.nextOffset, arrowPage.committed, arrowPage.skippedJSON, len(arrowPage.messages))
	}
}

type arrowPage struct {
	messages              []*orderlogpb.StoredMessage
	skipped               []*orderlogpb.SkippedRange
	nextOffset, committed uint64
	skippedJSON           string
}

// getArrowPage reads GET /v1/messages from `from` as Arrow and checks that
// the headers carry the schema metadata's paging.
func getArrowPage(t *testing.T, s *Server, from uint64) arrowPage {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+s.HTTPAddr()+"/v1/messages?limit=10000&offset="+strconv.FormatUint(from, 10), nil)
	req.Header.Set("Accept", arrowpage.ContentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != arrowpage.ContentType {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("offset %d: status %d, %s", from, resp.StatusCode, body)
	}
	r, err := ipc.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	md := r.Schema().Metadata()
	var page arrowPage
	for key, header := range map[string]string{arrowpage.KeyNextOffset: httpapi.HeaderNextOffset,
		arrowpage.KeyCommitted: httpapi.HeaderCommitted, arrowpage.KeySkipped: httpapi.HeaderSkipped} {
		value, ok := md.GetValue(key)
		if !ok || value != resp.Header.Get(header) {
			t.Fatalf("offset %d: metadata %s = %q, header %s = %q", from, key, value, header, resp.Header.Get(header))
		}
	}
	next, _ := md.GetValue(arrowpage.KeyNextOffset)
	committed, _ := md.GetValue(arrowpage.KeyCommitted)
	page.skippedJSON, _ = md.GetValue(arrowpage.KeySkipped)
	page.nextOffset, _ = strconv.ParseUint(next, 10, 64)
	page.committed, _ = strconv.ParseUint(committed, 10, 64)
	if err := json.Unmarshal([]byte(page.skippedJSON), &page.skipped); err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		page.messages = append(page.messages, messagesOfRecord(t, r.RecordBatch())...)
	}
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
	return page
}

// messagesOfRecord decodes record batches of the archive's schema, column
// by column, without parquetfile's reader.
func messagesOfRecord(t *testing.T, rec arrow.RecordBatch) []*orderlogpb.StoredMessage {
	t.Helper()
	if !rec.Schema().Equal(parquetfile.ArrowSchema()) {
		t.Fatalf("schema %v, want the archive's", rec.Schema())
	}
	offsets := rec.Column(0).(*array.Int64)
	topics := rec.Column(1).(*array.String)
	keys := rec.Column(2).(*array.Binary)
	producers, seqs := rec.Column(3).(*array.Int64), rec.Column(4).(*array.Int64)
	ids := rec.Column(5).(*array.Binary)
	ingest, clientTimes := rec.Column(6).(*array.Timestamp), rec.Column(7).(*array.Timestamp)
	payloads := rec.Column(8).(*array.Binary)
	headers := rec.Column(9).(*array.List)
	headerFields := headers.ListValues().(*array.Struct)
	headerKeys, headerValues := headerFields.Field(0).(*array.String), headerFields.Field(1).(*array.Binary)
	schemaVersions := rec.Column(10)
	out := make([]*orderlogpb.StoredMessage, rec.NumRows())
	for i := range out {
		msg := &orderlogpb.Message{Topic: topics.Value(i), Value: payloads.Value(i)}
		if keys.IsValid(i) {
			msg.Key = keys.Value(i)
		}
		if ids.IsValid(i) {
			msg.MessageId = ids.Value(i)
		}
		if clientTimes.IsValid(i) {
			msg.ClientTimeUs = int64(clientTimes.Value(i))
		}
		start, end := headers.ValueOffsets(i)
		for j := int(start); j < int(end); j++ {
			msg.Headers = append(msg.Headers, &orderlogpb.Header{Key: headerKeys.Value(j), Value: headerValues.Value(j)})
		}
		if schemaVersions.IsValid(i) {
			t.Fatalf("row %d: schema_version is set", i)
		}
		out[i] = &orderlogpb.StoredMessage{Offset: uint64(offsets.Value(i)), Message: msg, ProducerId: uint64(producers.Value(i)),
			ProducerSeq: uint64(seqs.Value(i)), IngestTimeUs: int64(ingest.Value(i))}
	}
	return out
}

func appendMerged(skipped []*orderlogpb.SkippedRange, s *orderlogpb.SkippedRange) []*orderlogpb.SkippedRange {
	if n := len(skipped); n > 0 && skipped[n-1].End == s.First && skipped[n-1].Reason == s.Reason {
		skipped[n-1] = &orderlogpb.SkippedRange{First: skipped[n-1].First, End: s.End, Reason: s.Reason}
		return skipped
	}
	return append(skipped, s)
}

// A Flight client asks for a range from the middle of the first archived
// file to C, across T: the endpoints partition it in order, the archived
// files wholly inside it are located at their objects, and the DoGets of
// every endpoint's ticket together are the gRPC read of the range. A query
// by key is served the same way.
func TestFlightServesARangeAcrossTAndAQuery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := startArchivedNode(t, ctx)
	fc, err := flight.NewClientWithMiddleware(n.s.GRPCAddr(), nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()

	files := n.s.archive.FilesWithin(0, n.t)
	if len(files) < 2 {
		t.Fatalf("%d archive files below T=%d; want several", len(files), n.t)
	}
	first := (files[0].First + files[0].End) / 2
	info, err := fc.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: fmt.Appendf(nil, `{"first":%d}`, first)})
	if err != nil {
		t.Fatal(err)
	}
	got, located := doGetAll(t, ctx, fc, info, first, n.c0)
	if located != len(files)-1 {
		t.Fatalf("%d endpoints located at an object; want the %d files wholly after offset %d", located, len(files)-1, first)
	}
	if err := sameRead(readRange(t, ctx, n.c, first, nil), got); err != nil {
		t.Fatalf("the Flight read of [%d, %d) differs from the gRPC read: %v", first, n.c0, err)
	}
	if last := info.Endpoint[len(info.Endpoint)-1]; len(last.Location) != 0 {
		t.Fatalf("the last endpoint, above T=%d, is located at %v", n.t, last.Location)
	}

	byKey := &orderlogpb.QueryRequest{Key: []byte("k3")}
	info, err = fc.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorCMD, Cmd: []byte(`{"key":"k3"}`)})
	if err != nil {
		t.Fatal(err)
	}
	got, _ = doGetAll(t, ctx, fc, info, 0, n.c0)
	want := readRange(t, ctx, n.c, 0, byKey)
	if err := sameRead(want, got); err != nil || len(want.messages) == 0 {
		t.Fatalf("the Flight query by key differs from the gRPC query (%d messages): %v", len(want.messages), err)
	}
}

// doGetAll checks that info's endpoints partition [first, end) in order,
// that each located one names its archive file, and returns the union of
// their DoGets and how many were located.
func doGetAll(t *testing.T, ctx context.Context, fc flight.Client, info *flight.FlightInfo, first, end uint64) (logRead, int) {
	t.Helper()
	var out logRead
	located := 0
	cursor := first
	for i, ep := range info.Endpoint {
		var tkt struct{ First, End uint64 }
		if err := json.Unmarshal(ep.Ticket.Ticket, &tkt); err != nil || tkt.First != cursor || tkt.End <= tkt.First {
			t.Fatalf("endpoint %d: ticket %s, want one from %d (%v)", i, ep.Ticket.Ticket, cursor, err)
		}
		cursor = tkt.End
		if len(ep.Location) > 0 {
			located++
			checkLocatedFile(t, ep.Location[0].Uri, tkt.First, tkt.End)
		}
		stream, err := fc.DoGet(ctx, ep.Ticket)
		if err != nil {
			t.Fatal(err)
		}
		r, err := flight.NewRecordReader(stream)
		if err != nil {
			t.Fatal(err)
		}
		for r.Next() {
			out.messages = append(out.messages, messagesOfRecord(t, r.RecordBatch())...)
			var page struct{ Skipped []*orderlogpb.SkippedRange }
			if err := json.Unmarshal(r.LatestAppMetadata(), &page); err != nil {
				t.Fatalf("app_metadata %s: %v", r.LatestAppMetadata(), err)
			}
			for _, s := range page.Skipped {
				out.skipped = appendMerged(out.skipped, s)
			}
		}
		if err := r.Err(); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		r.Release()
	}
	if cursor != end {
		t.Fatalf("the endpoints end at %d, want %d", cursor, end)
	}
	return out, located
}

// checkLocatedFile opens a located object as an archive file of [first, end).
func checkLocatedFile(t *testing.T, uri string, first, end uint64) {
	t.Helper()
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" || filepath.Ext(u.Path) != ".parquet" {
		t.Fatalf("location %q: want a file:// URL of a .parquet object (%v)", uri, err)
	}
	f, err := os.Open(u.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquetfile.Open(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	if m := pf.Meta(); m.First != first || m.End != end {
		t.Fatalf("%s holds [%d, %d), its endpoint [%d, %d)", uri, m.First, m.End, first, end)
	}
}
