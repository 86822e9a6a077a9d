// Package arrowpage renders one page of a read (an orderlogpb.ReadResponse)
// as Arrow, for the HTTP API's Arrow answer and the Flight service: its
// messages as one record batch of the archive's schema
// (tiering/parquetfile, docs/format/archive.md), its paging — where the
// next page starts, the committed watermark, the skipped ranges — as
// metadata beside the batch, because Arrow has no column for a hole.
//
// The paging travels as string key-values (Metadata): the HTTP API puts
// them in the stream's schema metadata and in response headers; the
// Flight service sends the same values as one JSON object in each batch's
// app_metadata (AppMetadata). The skipped ranges are the JSON read's
// `skipped` array in both.
//
// It never reads the log or decides paging: it renders what the reader
// returned, byte for byte.
package arrowpage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"orderlog/proto/orderlogpb"
	"orderlog/tiering/parquetfile"
)

// ContentType is the media type of an Arrow IPC stream.
const ContentType = "application/vnd.apache.arrow.stream"

// The metadata keys of a page, in the order Metadata lists them.
const (
	// KeyNextOffset is where the next page starts (decimal).
	KeyNextOffset = "orderlog.next_offset"
	// KeyCommitted is the committed watermark C when the page was read
	// (decimal).
	KeyCommitted = "orderlog.committed"
	// KeySkipped is the page's skipped ranges, a JSON array of
	// {"first","end","reason"} (reason only when not a hole), `[]` for none.
	KeySkipped = "orderlog.skipped"
)

// skipped is one skipped range as JSON, as the JSON read renders it.
type skipped struct {
	First  uint64 `json:"first"`
	End    uint64 `json:"end"`
	Reason string `json:"reason,omitempty"`
}

// Info is a page's paging as JSON (AppMetadata): the JSON read's fields
// without its messages.
type Info struct {
	NextOffset uint64    `json:"next_offset"`
	Committed  uint64    `json:"committed"`
	Skipped    []skipped `json:"skipped"`
}

// InfoOf returns a page's paging.
func InfoOf(page *orderlogpb.ReadResponse) Info {
	info := Info{NextOffset: page.GetNextOffset(), Committed: page.GetCommitted(), Skipped: []skipped{}}
	for _, s := range page.GetSkipped() {
		info.Skipped = append(info.Skipped, skipped{First: s.First, End: s.End, Reason: s.Reason})
	}
	return info
}

// Metadata returns a page's paging as the keys KeyNextOffset, KeyCommitted
// and KeySkipped, in that order.
func Metadata(page *orderlogpb.ReadResponse) arrow.Metadata {
	info := InfoOf(page)
	skippedJSON, _ := json.Marshal(info.Skipped) // cannot fail: numbers and strings
	return arrow.NewMetadata(
		[]string{KeyNextOffset, KeyCommitted, KeySkipped},
		[]string{strconv.FormatUint(info.NextOffset, 10), strconv.FormatUint(info.Committed, 10), string(skippedJSON)})
}

// AppMetadata returns a page's paging as one JSON object,
// {"next_offset":N,"committed":C,"skipped":[...]}.
func AppMetadata(page *orderlogpb.ReadResponse) []byte {
	b, _ := json.Marshal(InfoOf(page)) // cannot fail: numbers and strings
	return b
}

// Record returns the page's messages as one record batch of
// parquetfile.ArrowSchema (without metadata); the caller releases it.
func Record(page *orderlogpb.ReadResponse) (arrow.RecordBatch, error) {
	rec, err := parquetfile.NewArrowRecord(page.GetMessages())
	if err != nil {
		return nil, fmt.Errorf("arrowpage: %w", err)
	}
	return rec, nil
}

// Schema returns the archive's schema with the page's paging as its
// metadata.
func Schema(page *orderlogpb.ReadResponse) *arrow.Schema {
	md := Metadata(page)
	return arrow.NewSchema(parquetfile.ArrowSchema().Fields(), &md)
}

// Encode returns the page as a whole Arrow IPC stream: the schema with the
// paging as its metadata, then one record batch holding the page's
// messages (no rows when it has none).
func Encode(page *orderlogpb.ReadResponse) ([]byte, error) {
	rec, err := Record(page)
	if err != nil {
		return nil, err
	}
	defer rec.Release()
	var buf bytes.Buffer
	if err := writeStream(&buf, Schema(page), rec); err != nil {
		return nil, fmt.Errorf("arrowpage: encode: %w", err)
	}
	return buf.Bytes(), nil
}

func writeStream(w io.Writer, schema *arrow.Schema, rec arrow.RecordBatch) error {
	iw := ipc.NewWriter(w, ipc.WithSchema(schema), ipc.WithAllocator(memory.DefaultAllocator))
	if err := iw.Write(rec); err != nil {
		iw.Close()
		return err
	}
	return iw.Close()
}
