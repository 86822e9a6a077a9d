package parquetfile

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"orderlog/proto/orderlogpb"
)

// writeRaw writes msgs with the archive schema and settings but the given
// footer key-values (in order), as a foreign or forged writer would.
func writeRaw(t *testing.T, msgs []*orderlogpb.StoredMessage, kv [][2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	o := WriterOptions{}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	fw, err := pqarrow.NewFileWriter(archiveSchema, &buf, writerProperties(o), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	rows := newRowBuilder()
	defer rows.release()
	for _, m := range msgs {
		rows.append(m, 0)
	}
	rec := rows.newRecord()
	defer rec.Release()
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	for _, p := range kv {
		if err := fw.AppendKeyValueMetadata(p[0], p[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// tenRows are rows at offsets 0..4 and 6..10: [0, 11) with hole [5, 6).
func tenRows() []*orderlogpb.StoredMessage {
	var msgs []*orderlogpb.StoredMessage
	for _, off := range []uint64{0, 1, 2, 3, 4, 6, 7, 8, 9, 10} {
		msgs = append(msgs, &orderlogpb.StoredMessage{Offset: off, Message: &orderlogpb.Message{Topic: "t", Value: []byte{byte(off)}}})
	}
	return msgs
}

// footer returns the footer key-values of tenRows with changes applied
// (an empty value removes the key).
func footer(change map[string]string) [][2]string {
	values := map[string]string{
		keyFormatVersion: "2", keyFirst: "0", keyEnd: "11", keyHoles: "[[5,6]]", keyRows: "10",
		keyDigest: digestOf(tenRows()),
	}
	for k, v := range change {
		values[k] = v
	}
	var kv [][2]string
	for _, k := range footerKeys {
		if v := values[k]; v != "" {
			kv = append(kv, [2]string{k, v})
		}
	}
	return kv
}

func TestOpenRejects(t *testing.T) {
	good := writeRaw(t, tenRows(), footer(nil))
	if _, err := Open(bytes.NewReader(good), int64(len(good))); err != nil {
		t.Fatalf("the forged writer's good file: %v", err)
	}
	cases := map[string]struct {
		data []byte
		want error
	}{
		"no_orderlog_keys":  {writeRaw(t, tenRows(), nil), ErrNotArchive},
		"other_keys_only":   {writeRaw(t, tenRows(), [][2]string{{"ARROW:schema", "x"}, {"writer", "spark"}}), ErrNotArchive},
		"version_3":         {writeRaw(t, tenRows(), footer(map[string]string{keyFormatVersion: "3"})), ErrUnsupportedVersion},
		"v1_with_schema_id": {writeRaw(t, tenRows(), footer(map[string]string{keyFormatVersion: "1"})), ErrCorrupt},
		"no_version":        {writeRaw(t, tenRows(), footer(map[string]string{keyFormatVersion: ""})), ErrUnsupportedVersion},
		"missing_digest":    {writeRaw(t, tenRows(), footer(map[string]string{keyDigest: ""})), ErrCorrupt},
		"rows_vs_holes":     {writeRaw(t, tenRows(), footer(map[string]string{keyRows: "11"})), ErrCorrupt},
		"rows_vs_file":      {writeRaw(t, tenRows(), footer(map[string]string{keyRows: "11", keyHoles: "[]"})), ErrCorrupt},
		"range_too_short":   {writeRaw(t, tenRows(), footer(map[string]string{keyEnd: "10", keyRows: "9"})), ErrCorrupt},
		"last_row_in_hole":  {writeRaw(t, tenRows(), footer(map[string]string{keyHoles: "[[10,11]]"})), ErrCorrupt},
		"holes_unsorted":    {writeRaw(t, tenRows(), footer(map[string]string{keyHoles: "[[7,8],[5,6]]", keyRows: "9"})), ErrCorrupt},
		"holes_touching":    {writeRaw(t, tenRows(), footer(map[string]string{keyHoles: "[[5,6],[6,7]]", keyRows: "9"})), ErrCorrupt},
		"holes_spaces":      {writeRaw(t, tenRows(), footer(map[string]string{keyHoles: "[[5, 6]]"})), ErrCorrupt},
		"holes_not_json":    {writeRaw(t, tenRows(), footer(map[string]string{keyHoles: "5-6"})), ErrCorrupt},
		"first_not_decimal": {writeRaw(t, tenRows(), footer(map[string]string{keyFirst: "00"})), ErrCorrupt},
		"digest_malformed":  {writeRaw(t, tenRows(), footer(map[string]string{keyDigest: "sha256:XYZ"})), ErrCorrupt},
		"duplicate_key":     {writeRaw(t, tenRows(), append(footer(nil), [2]string{keyRows, "10"})), ErrCorrupt},
		"empty_range":       {writeRaw(t, nil, footer(map[string]string{keyEnd: "0", keyRows: "0", keyHoles: "[]"})), ErrCorrupt},
		"rows_before_range": {writeRaw(t, tenRows(), footer(map[string]string{keyFirst: "1", keyRows: "9"})), ErrCorrupt},
		"not_parquet":       {[]byte("PAR1 this is not a parquet file PAR1"), nil},
		"truncated":         {good[:len(good)-10], nil},
		"empty":             {nil, nil},
	}
	for name, tc := range cases {
		_, err := Open(bytes.NewReader(tc.data), int64(len(tc.data)))
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: Open = %v, want %v", name, err, tc.want)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
}

// TestReadCatchesFooterLies: footers that Open cannot refute from metadata
// alone (the row groups' first and last offsets and counts agree) are
// caught by Read, and by Verify for the digest.
func TestReadCatchesFooterLies(t *testing.T) {
	cases := map[string]struct {
		footer  map[string]string
		readErr bool
	}{
		"hole_moved":   {footer: map[string]string{keyHoles: "[[3,4]]"}, readErr: true},
		"wrong_digest": {footer: map[string]string{keyDigest: "sha256:" + strings.Repeat("0", 64)}},
	}
	for name, tc := range cases {
		data := writeRaw(t, tenRows(), footer(tc.footer))
		f, err := Open(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatalf("%s: Open: %v", name, err)
		}
		err = f.Read(context.Background(), 0, 11, func(*orderlogpb.StoredMessage) error { return nil })
		if tc.readErr != (err != nil) || (err != nil && !errors.Is(err, ErrCorrupt)) {
			t.Errorf("%s: Read = %v", name, err)
		}
		if err := f.Verify(context.Background()); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Verify = %v, want ErrCorrupt", name, err)
		}
	}
}

// TestOpenSurvivesDamage flips bits in every fifth byte of a small file
// (pages, page index, bloom filters, footer): Open, Verify and
// MayContainKey return errors or (for bytes nobody checks) succeed, and
// never panic. arrow-go panics on several of these; see recoverCorrupt and
// checkChunks.
func TestOpenSurvivesDamage(t *testing.T) {
	good, _ := writeFile(t, 0, 11, tenRows(), WriterOptions{RowGroupRows: 4})
	masks := []byte{0x01, 0x80, 0xff}
	opened := 0
	for pos := 0; pos < len(good); pos += 5 {
		data := bytes.Clone(good)
		data[pos] ^= masks[pos%len(masks)]
		f, err := Open(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			continue
		}
		opened++
		_ = f.Verify(context.Background())
		f.MayContainKey("t", []byte("k"))
	}
	t.Logf("%d bytes, %d damaged copies opened", len(good), opened)
}
