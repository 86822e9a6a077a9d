package parquetfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"orderlog/proto/orderlogpb"
	"orderlog/tiering/parquetfile/duckcheck"
)

// versionOf is the schema_version the tests give a row: null without a
// schema id and for every third row with one (an id that is no version of
// its topic's subject), else a version from the offset.
func versionOf(m *orderlogpb.StoredMessage) int32 {
	if m.GetMessage().GetSchemaId() == 0 || m.Offset%3 == 0 {
		return 0
	}
	return int32(1 + m.Offset%5)
}

// writeVersioned writes msgs with versionOf's schema versions.
func writeVersioned(t testing.TB, first, end uint64, msgs []*orderlogpb.StoredMessage, o WriterOptions) ([]byte, Meta, []int32) {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, first, o)
	if err != nil {
		t.Fatal(err)
	}
	versions := make([]int32, len(msgs))
	for i, m := range msgs {
		versions[i] = versionOf(m)
		if err := w.AppendVersioned(m, versions[i]); err != nil {
			t.Fatal(err)
		}
	}
	meta, err := w.Close(end)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), meta, versions
}

// TestSchemaVersionsRoundTrip: schema ids come back in the messages
// (proto.Equal), schema versions from ReadVersioned, from any offset, in
// clear and encrypted; both are in the digest.
func TestSchemaVersionsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 21))
	msgs := genMessages(rng, genOptions{first: 100, end: 2100, holeChance: 0.1, topics: 3, payloadSize: 30, keyChance: 0.5})
	for name, o := range map[string]WriterOptions{
		"clear":     {RowGroupRows: 300, DataPageBytes: 1024},
		"encrypted": {RowGroupRows: 300, DataPageBytes: 1024, Keys: testKeys(t, 3)},
	} {
		t.Run(name, func(t *testing.T) {
			data, meta, versions := writeVersioned(t, 100, 2100, msgs, o)
			if meta.FormatVersion != 2 || meta.Digest != Digest(msgs, versions) || meta.Digest == Digest(msgs, nil) {
				t.Fatalf("meta %+v: want version 2 and the digest of the rows with their schema versions", meta)
			}
			f, err := Open(bytes.NewReader(data), int64(len(data)), WithKeys(o.Keys))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Verify(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, from := range []uint64{100, 101, 777, 2050} {
				i := 0
				for i < len(msgs) && msgs[i].Offset < from {
					i++
				}
				err := f.ReadVersioned(context.Background(), from, 2100, func(m *orderlogpb.StoredMessage, v int32) error {
					if !proto.Equal(m, msgs[i]) || v != versions[i] {
						return fmt.Errorf("offset %d: %v version %d, want %v version %d", m.Offset, m, v, msgs[i], versions[i])
					}
					i++
					return nil
				})
				if err != nil || i != len(msgs) {
					t.Fatalf("from %d: %v (%d of %d rows)", from, err, i, len(msgs))
				}
			}
		})
	}
}

func TestAppendVersionedRefuses(t *testing.T) {
	w, err := NewWriter(&bytes.Buffer{}, 0, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	noID := &orderlogpb.StoredMessage{Offset: 0, Message: &orderlogpb.Message{Topic: "t"}}
	withID := &orderlogpb.StoredMessage{Offset: 1, Message: &orderlogpb.Message{Topic: "t", SchemaId: 4}}
	for name, err := range map[string]error{
		"version_without_id": w.AppendVersioned(noID, 1),
		"negative_version":   w.AppendVersioned(withID, -1),
	} {
		if !errors.Is(err, ErrInvalidMessage) {
			t.Errorf("%s: %v, want ErrInvalidMessage", name, err)
		}
	}
	if err := w.AppendVersioned(withID, 0); err != nil {
		t.Fatalf("an id without a version: %v", err)
	}
}

// v1FixtureMessages are the rows of testdata/format-v1.parquet, written
// by the format version 1 writer (commit 91f2a07) over [100, 165) with
// row groups of 20 rows.
func v1FixtureMessages() []*orderlogpb.StoredMessage {
	var msgs []*orderlogpb.StoredMessage
	for o := uint64(100); o < 160; o++ {
		if o%9 == 4 || (o >= 130 && o < 134) {
			continue // holes
		}
		m := &orderlogpb.StoredMessage{Offset: o, ProducerId: o % 4, ProducerSeq: o * 3, IngestTimeUs: 1_780_000_000_000_000 + int64(o)*1000,
			Message: &orderlogpb.Message{Topic: fmt.Sprintf("topic-%d", o%3), Value: bytes.Repeat([]byte{byte(o)}, int(o%50))}}
		if o%2 == 0 {
			m.Message.Key = fmt.Appendf(nil, "key-%d", o%7)
		}
		if o%3 == 0 {
			m.Message.MessageId = fmt.Appendf(nil, "id-%d", o)
			m.Message.ClientTimeUs = 1_780_000_000_000_000 + int64(o)
		}
		if o%5 == 0 {
			m.Message.Headers = []*orderlogpb.Header{{Key: "a", Value: []byte("1")}, {Key: "a", Value: nil}, {Key: "b", Value: []byte{byte(o)}}}
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// TestAFormatVersion1FileIsRead: a file the version 1 writer wrote (no
// schema_id column) opens, verifies, reads as it was written and queries;
// the same rows written now have the same digest (no schema ids, so the
// schema flags byte is version 1's null presence byte).
func TestAFormatVersion1FileIsRead(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "format-v1.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	want := v1FixtureMessages()
	f, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	meta := f.Meta()
	if meta.FormatVersion != 1 || meta.First != 100 || meta.End != 165 || meta.Rows != int64(len(want)) {
		t.Fatalf("meta %+v", meta)
	}
	if err := f.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got []*orderlogpb.StoredMessage
	if err := f.ReadVersioned(context.Background(), 0, 200, func(m *orderlogpb.StoredMessage, v int32) error {
		if v != 0 {
			return fmt.Errorf("offset %d: schema_version %d", m.Offset, v)
		}
		got = append(got, m)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("row %d: %v, want %v", i, got[i], want[i])
		}
	}
	var selected int
	if err := f.Select(context.Background(), 0, 200, "topic-1", nil, func(s Selected) error {
		if s.Message != nil {
			selected++
		}
		return nil
	}); err != nil || selected == 0 {
		t.Fatalf("select topic-1: %d messages, %v", selected, err)
	}
	_, now := writeFile(t, 100, 165, want, WriterOptions{RowGroupRows: 20})
	if now.FormatVersion != 2 || now.Digest != meta.Digest {
		t.Fatalf("written now: version %d digest %s; version 1's digest %s", now.FormatVersion, now.Digest, meta.Digest)
	}
}

// TestDuckDBAgreesOnSchemaColumns: DuckDB reads schema_version and
// schema_id as written, and recomputes the digest of a version 2 file with
// both and of the version 1 fixture.
func TestDuckDBAgreesOnSchemaColumns(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 22))
	msgs := genMessages(rng, genOptions{first: 0, end: 500, holeChance: 0.1, topics: 2, payloadSize: 10, keyChance: 0.5})
	data, meta, _ := writeVersioned(t, 0, 500, msgs, WriterOptions{RowGroupRows: 100})
	path := filepath.Join(t.TempDir(), "v2.parquet")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	v1, err := os.ReadFile(filepath.Join("testdata", "format-v1.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	v1f, err := Open(bytes.NewReader(v1), int64(len(v1)))
	if err != nil {
		t.Fatal(err)
	}
	var got []duckCheck
	v1Path, err := filepath.Abs(filepath.Join("testdata", "format-v1.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	duckcheck.Run(t, &got, path, v1Path)
	if len(got) != 2 || got[0].Digest != meta.Digest || got[1].Digest != v1f.Meta().Digest {
		t.Fatalf("DuckDB's digests %+v, want %s and %s", got, meta.Digest, v1f.Meta().Digest)
	}
	if !equalColumns(got[1].Columns, duckColumns[:len(duckColumns)-1]) {
		t.Fatalf("DuckDB's columns of the version 1 file: %v", got[1].Columns)
	}
}

func equalColumns(a, b []duckColumn) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
