package tiering

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
	"orderlog/reader"
	"orderlog/tiering/parquetfile"
)

// TestArchiveKeys: the archive keys derive from the key file's lines,
// one per id, the last current; they differ from the WAL keys and from
// each other, are the same for the same line, and the file is refused
// as ingest/wal refuses it.
func TestArchiveKeys(t *testing.T) {
	text := "# rotated\n1 " + strings.Repeat("11", 32) + "\n\n2 " + strings.Repeat("22", 32) + "\n"
	keys, err := ArchiveKeys([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := keys.Current(); !ok || id != 2 {
		t.Fatalf("current key %d %v, want 2", id, ok)
	}
	again, _ := ArchiveKeys([]byte("2 " + strings.Repeat("22", 32)))
	msgs := simpleMessages(0, 10)
	a := buildArchive(t, msgs, []uint64{0, 10}, parquetfile.WriterOptions{Keys: again})
	data, err := a.store.Get(context.Background(), a.entries[0].Object)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parquetfile.Open(bytes.NewReader(data), int64(len(data)), parquetfile.WithKeys(keys)); err != nil {
		t.Fatalf("a file written under key 2 derived from one file does not open with another holding the same line: %v", err)
	}
	for _, bad := range []string{"", "1 abc", "1 " + strings.Repeat("zz", 32), "x " + strings.Repeat("11", 32)} {
		if _, err := ArchiveKeys([]byte(bad)); err == nil {
			t.Errorf("key file %q accepted", bad)
		} else if strings.Contains(err.Error(), strings.Repeat("11", 32)) {
			t.Errorf("the error quotes the key: %v", err)
		}
	}
}

// TestArchiveReaderEncrypted: an archive of encrypted files reads with the
// keys exactly as the same archive in clear; without the key id, or with
// other bytes under it, a read fails with INTERNAL naming the key id and
// serves nothing.
func TestArchiveReaderEncrypted(t *testing.T) {
	msgs := simpleMessages(0, 300, Hole{First: 120, End: 130})
	write, _ := ArchiveKeys([]byte("4 " + strings.Repeat("44", 32)))
	a := buildArchive(t, msgs, []uint64{0, 100, 200, 300}, parquetfile.WriterOptions{Keys: write, RowGroupRows: 40})
	ctx := context.Background()
	scan := func(keys *parquetfile.Keys) ([]*orderlogpb.StoredMessage, error) {
		r := a.reader(t, nil, ReaderOptions{Keys: keys})
		r.noteHead(ctx, headValue(t, a.head))
		var got []*orderlogpb.StoredMessage
		_, err := r.Scan(ctx, 0, 300, reader.Filter{}, func(item reader.ArchiveItem) bool {
			if item.Message != nil {
				got = append(got, item.Message)
			}
			return true
		})
		return got, err
	}
	got, err := scan(write)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(msgs) {
		t.Fatalf("read %d messages, want %d", len(got), len(msgs))
	}
	for i := range got {
		if !proto.Equal(got[i], msgs[i]) {
			t.Fatalf("message %d: %v, want %v", i, got[i], msgs[i])
		}
	}
	other, _ := ArchiveKeys([]byte("4 " + strings.Repeat("55", 32)))
	missing, _ := ArchiveKeys([]byte("5 " + strings.Repeat("44", 32)))
	for name, keys := range map[string]*parquetfile.Keys{"none": nil, "missing_id": missing, "wrong_bytes": other} {
		got, err := scan(keys)
		var apiErr *apierr.Error
		if !errors.As(err, &apiErr) || apiErr.Code != apierr.Internal || !strings.Contains(err.Error(), "key id 4") || len(got) != 0 {
			t.Errorf("%s: %d messages, %v; want none and INTERNAL naming key id 4", name, len(got), err)
		}
		t.Logf("%s: %v", name, err)
	}
}
