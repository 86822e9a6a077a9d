package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"orderlog/proto/orderlogpb"
	"orderlog/tiering"
	"orderlog/tiering/parquetfile"
)

// archiveCompareFile is an archive file of [100, 120) with holes [107,
// 109) and [119, 120), and the log's read of that range: a page of 5
// offsets at a time, as a reader serves it.
type archiveCompareFile struct {
	file  *parquetfile.File
	entry tiering.ManifestEntry
	rows  []*orderlogpb.StoredMessage
}

func newArchiveCompareFile(t *testing.T) archiveCompareFile {
	t.Helper()
	holes := []tiering.Hole{{First: 107, End: 109}, {First: 119, End: 120}}
	var buf bytes.Buffer
	w, err := parquetfile.NewWriter(&buf, 100, parquetfile.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var rows []*orderlogpb.StoredMessage
	for o := uint64(100); o < 120; o++ {
		if o == 107 || o == 108 || o == 119 {
			continue
		}
		m := &orderlogpb.StoredMessage{Offset: o, ProducerId: 3, ProducerSeq: o - 100, IngestTimeUs: 1_700_000_000_000_000 + int64(o),
			Message: &orderlogpb.Message{Topic: "t", Key: []byte{byte(o)}, Value: fmt.Appendf(nil, "value %d", o),
				Headers: []*orderlogpb.Header{{Key: "h", Value: []byte("v")}}}}
		if err := w.Append(m); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, m)
	}
	meta, err := w.Close(120)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquetfile.Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	entry := tiering.ManifestEntry{First: 100, End: 120, Rows: meta.Rows, Holes: holes, Digest: meta.Digest}
	return archiveCompareFile{file: f, entry: entry, rows: rows}
}

// logRead is the log's read of the file's range, as items: per page of 5
// offsets, the skipped ranges and then the messages.
func (a archiveCompareFile) logRead() []logItem {
	var items []logItem
	for page := uint64(100); page < 120; page += 5 {
		for _, h := range a.entry.Holes {
			if lo, hi := max(h.First, page), min(h.End, page+5); lo < hi {
				items = append(items, logItem{skipped: &orderlogpb.SkippedRange{First: lo, End: hi}})
			}
		}
		for _, m := range a.rows {
			if m.Offset >= page && m.Offset < page+5 {
				items = append(items, logItem{message: proto.CloneOf(m)})
			}
		}
	}
	return items
}

// TestArchiveCLIMatchLog checks the comparison of a file with the log's
// read of its range, on a file and reads damaged one way each.
func TestArchiveCLIMatchLog(t *testing.T) {
	withoutMessage := func(items []logItem, offset uint64) []logItem {
		return slices.DeleteFunc(items, func(it logItem) bool { return it.message != nil && it.message.Offset == offset })
	}
	for name, c := range map[string]struct {
		damage   func(items []logItem) []logItem
		compared int64
		hidden   uint64
		err      string
	}{
		"same": {damage: func(items []logItem) []logItem { return items }, compared: 17},
		"payload_differs": {damage: func(items []logItem) []logItem {
			items[4].message.Message.Value = []byte("other")
			return items
		}, err: "differs from the log's (payload)"},
		"header_differs": {damage: func(items []logItem) []logItem {
			items[2].message.Message.Headers[0].Value = nil
			return items
		}, err: "(headers)"},
		"log_lacks_a_message": {damage: func(items []logItem) []logItem { return withoutMessage(items, 112) },
			err: "the file has a message at 112 that the log does not serve"},
		"log_has_a_message_in_a_hole": {damage: func(items []logItem) []logItem {
			extra := &orderlogpb.StoredMessage{Offset: 119, Message: &orderlogpb.Message{Topic: "t"}}
			items = slices.DeleteFunc(items, func(it logItem) bool { return it.skipped != nil && it.skipped.First == 119 })
			return append(items, logItem{message: extra})
		}, err: "the log has a message at 119 that the file lacks"},
		"log_hides_a_message": {damage: func(items []logItem) []logItem {
			// Its page is [110, 115): the skipped range comes first.
			items = withoutMessage(items, 111)
			at := slices.IndexFunc(items, func(it logItem) bool { return it.message != nil && it.message.Offset == 110 })
			return slices.Insert(items, at, logItem{skipped: &orderlogpb.SkippedRange{First: 111, End: 112, Reason: "retention"}})
		}, compared: 16, hidden: 1},
		"log_misses_a_hole": {damage: func(items []logItem) []logItem {
			return slices.DeleteFunc(items, func(it logItem) bool { return it.skipped != nil && it.skipped.First == 119 })
		}, err: "the log's holes are"},
	} {
		t.Run(name, func(t *testing.T) {
			a := newArchiveCompareFile(t)
			compared, hidden, err := matchLogItems(t, a, c.damage(a.logRead()))
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("error %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("error %v, want one saying %q", err, c.err)
			case c.err == "" && (compared != c.compared || hidden != c.hidden):
				t.Fatalf("compared %d, hidden %d; want %d, %d", compared, hidden, c.compared, c.hidden)
			}
		})
	}
}

// matchLogItems runs matchLog with the items fed as a read would.
func matchLogItems(t *testing.T, a archiveCompareFile, items []logItem) (int64, uint64, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := make(chan logItem)
	readDone := make(chan error, 1)
	go func() {
		defer close(ch)
		for _, it := range items {
			select {
			case ch <- it:
			case <-ctx.Done():
				readDone <- ctx.Err()
				return
			}
		}
		readDone <- nil
	}()
	return matchLog(ctx, a.file, a.entry, ch, readDone, cancel)
}
