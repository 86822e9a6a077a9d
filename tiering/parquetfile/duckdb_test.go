package parquetfile

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"orderlog/proto/orderlogpb"
	"orderlog/tiering/parquetfile/duckcheck"
)

// duckCheck is what duckcheck/check.mjs prints for one file.
type duckCheck struct {
	File      string            `json:"file"`
	Rows      int64             `json:"rows"`
	MinOffset *string           `json:"min_offset"`
	MaxOffset *string           `json:"max_offset"`
	InOrder   bool              `json:"in_order"`
	Columns   []duckColumn      `json:"columns"`
	KV        map[string]string `json:"kv"`
	Holes     *string           `json:"holes"`
	Digest    string            `json:"digest"`
}

type duckColumn struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// duckColumns is the schema as DuckDB types it.
var duckColumns = []duckColumn{
	{"log_offset", "BIGINT"},
	{"topic", "VARCHAR"},
	{"key", "BLOB"},
	{"producer_id", "BIGINT"},
	{"producer_seq", "BIGINT"},
	{"message_id", "BLOB"},
	{"ingest_time", "TIMESTAMP WITH TIME ZONE"},
	{"client_time", "TIMESTAMP WITH TIME ZONE"},
	{"payload", "BLOB"},
	{"headers", `STRUCT("key" VARCHAR, "value" BLOB)[]`},
	{"schema_version", "INTEGER"},
	{"schema_id", "BIGINT"},
}

func TestDuckDBAgrees(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(11, 11))
	type written struct {
		path string
		meta Meta
		msgs []*orderlogpb.StoredMessage
	}
	var files []written
	for i, g := range []genOptions{
		{first: 5000, end: 9000, holeChance: 0.1, topics: 4, payloadSize: 64, keyChance: 0.6},
		{first: 1 << 40, end: 1<<40 + 50, holeChance: 1}, // holes only: no row group
		{first: 0, end: 3, topics: 1, payloadSize: 0},    // empty payloads
	} {
		msgs := genMessages(rng, g)
		data, meta := writeFile(t, g.first, g.end, msgs, WriterOptions{RowGroupRows: 1000})
		path := filepath.Join(dir, "f"+strconv.Itoa(i)+".parquet")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, written{path, meta, msgs})
	}
	var got []duckCheck
	duckcheck.Run(t, &got, files[0].path, files[1].path, files[2].path)
	if len(got) != len(files) {
		t.Fatalf("check.mjs reported %d files, want %d", len(got), len(files))
	}
	for i, w := range files {
		d := got[i]
		if d.Rows != w.meta.Rows || !d.InOrder || !reflect.DeepEqual(d.Columns, duckColumns) {
			t.Errorf("%s: DuckDB sees %d rows (in order: %v), columns %v; want %d rows in order, columns %v",
				w.path, d.Rows, d.InOrder, d.Columns, w.meta.Rows, duckColumns)
		}
		if len(w.msgs) > 0 && (d.MinOffset == nil || d.MaxOffset == nil ||
			*d.MinOffset != strconv.FormatUint(w.msgs[0].Offset, 10) ||
			*d.MaxOffset != strconv.FormatUint(w.msgs[len(w.msgs)-1].Offset, 10)) {
			t.Errorf("%s: DuckDB offsets [%v, %v], want [%d, %d]", w.path, d.MinOffset, d.MaxOffset, w.msgs[0].Offset, w.msgs[len(w.msgs)-1].Offset)
		}
		wantKV := map[string]string{}
		for j, v := range footerValues(w.meta) {
			wantKV[footerKeys[j]] = v
		}
		if !reflect.DeepEqual(d.KV, wantKV) {
			t.Errorf("%s: DuckDB footer key-values %v, want %v", w.path, d.KV, wantKV)
		}
		if d.Holes == nil || *d.Holes != encodeHoles(w.meta.Holes) {
			t.Errorf("%s: holes from DuckDB's rows %v, footer %s", w.path, d.Holes, encodeHoles(w.meta.Holes))
		}
		if d.Digest != w.meta.Digest {
			t.Errorf("%s: DuckDB's digest %s, footer %s", w.path, d.Digest, w.meta.Digest)
		}
	}
}

// TestDuckDBRecipe runs the query docs/format/archive.md gives on a
// directory laid out by ObjectKey.
func TestDuckDBRecipe(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(12, 12))
	want := map[string]int{}
	day := time.Date(2026, 3, 4, 23, 0, 0, 0, time.UTC)
	for i, r := range []Range{{0, 1000}, {1000, 1700}, {1700, 2500}} {
		msgs := genMessages(rng, genOptions{first: r.First, end: r.End, holeChance: 0.2, topics: 3, payloadSize: 10})
		for _, m := range msgs {
			want[m.Message.Topic]++
		}
		data, _ := writeFile(t, r.First, r.End, msgs, WriterOptions{})
		path := filepath.Join(dir, ObjectKey("", r.First, r.End, day.Add(time.Duration(i)*time.Hour)))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var got map[string]int
	duckcheck.Run(t, &got, "--recipe", dir)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("topic counts from DuckDB %v, want %v", got, want)
	}
}
