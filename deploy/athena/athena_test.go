package athena

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"orderlog/proto/orderlogpb"
	"orderlog/tiering/parquetfile"
)

// column is a column of the table: its name and its type as Athena (Hive
// DDL) spells it, lower case and without spaces.
type column struct{ name, typ string }

func (c column) String() string { return c.name + " " + c.typ }

// ddl is what the test reads of messages.sql.
type ddl struct {
	columns, partitions []column
	location            string
	properties          map[string]string
	storedAsParquet     bool
}

func readDDL(t *testing.T) ddl {
	t.Helper()
	raw, err := os.ReadFile("messages.sql")
	if err != nil {
		t.Fatal(err)
	}
	sql := regexp.MustCompile(`(?m)--.*$`).ReplaceAllString(string(raw), "")
	var d ddl
	d.columns = parseColumns(t, sql, "CREATE EXTERNAL TABLE")
	d.partitions = parseColumns(t, sql, "PARTITIONED BY")
	if m := regexp.MustCompile(`(?i)\bLOCATION\s+'([^']*)'`).FindStringSubmatch(sql); m != nil {
		d.location = m[1]
	}
	d.storedAsParquet = regexp.MustCompile(`(?i)\bSTORED\s+AS\s+PARQUET\b`).MatchString(sql)
	props := parenthesized(t, sql, "TBLPROPERTIES")
	d.properties = map[string]string{}
	for _, m := range regexp.MustCompile(`'([^']*)'\s*=\s*'([^']*)'`).FindAllStringSubmatch(props, -1) {
		d.properties[m[1]] = m[2]
	}
	return d
}

// parenthesized returns what the parentheses after the first occurrence
// of keyword hold.
func parenthesized(t *testing.T, sql, keyword string) string {
	t.Helper()
	at := strings.Index(strings.ToUpper(sql), keyword)
	if at < 0 {
		t.Fatalf("messages.sql has no %s", keyword)
	}
	open := strings.Index(sql[at:], "(") + at
	depth := 0
	for i := open; i < len(sql); i++ {
		switch sql[i] {
		case '(':
			depth++
		case ')':
			if depth--; depth == 0 {
				return sql[open+1 : i]
			}
		}
	}
	t.Fatalf("messages.sql: unbalanced parentheses after %s", keyword)
	return ""
}

// parseColumns parses the column list after keyword: "`name` type" items
// separated by commas outside <> and ().
func parseColumns(t *testing.T, sql, keyword string) []column {
	t.Helper()
	var items []string
	depth, start := 0, 0
	list := parenthesized(t, sql, keyword)
	for i, r := range list {
		switch r {
		case '<', '(':
			depth++
		case '>', ')':
			depth--
		case ',':
			if depth == 0 {
				items, start = append(items, list[start:i]), i+1
			}
		}
	}
	items = append(items, list[start:])
	item := regexp.MustCompile("^`?([a-z_][a-z0-9_]*)`?\\s+(.+)$")
	var cols []column
	for _, text := range items {
		m := item.FindStringSubmatch(strings.TrimSpace(text))
		if m == nil {
			t.Fatalf("messages.sql: %s: cannot parse column %q", keyword, strings.TrimSpace(text))
		}
		cols = append(cols, column{name: m[1], typ: strings.ToLower(strings.Join(strings.Fields(m[2]), ""))})
	}
	return cols
}

// archiveColumns reads back the Arrow schema of an archive file the
// writer wrote, as Athena columns.
func archiveColumns(t *testing.T) []column {
	t.Helper()
	var buf bytes.Buffer
	w, err := parquetfile.NewWriter(&buf, 0, parquetfile.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := &orderlogpb.StoredMessage{Offset: 0, IngestTimeUs: time.Now().UnixMicro(), Message: &orderlogpb.Message{Topic: "t", Value: []byte("v")}}
	if err := w.Append(m); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(1); err != nil {
		t.Fatal(err)
	}
	r, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	schema, err := pqarrow.FromParquet(r.MetaData().Schema, &pqarrow.ArrowReadProperties{}, r.MetaData().KeyValueMetadata())
	if err != nil {
		t.Fatal(err)
	}
	var cols []column
	for _, f := range schema.Fields() {
		typ, err := athenaType(f.Type)
		if err != nil {
			t.Fatalf("column %s: %v", f.Name, err)
		}
		cols = append(cols, column{name: f.Name, typ: typ})
	}
	return cols
}

// athenaType is the Athena type that reads a Parquet column of Arrow type
// dt as it is: an error for any type the archive does not use.
func athenaType(dt arrow.DataType) (string, error) {
	switch t := dt.(type) {
	case *arrow.Int64Type:
		return "bigint", nil
	case *arrow.Int32Type:
		return "int", nil
	case *arrow.StringType:
		return "string", nil
	case *arrow.BinaryType:
		return "binary", nil
	case *arrow.TimestampType:
		// Parquet TIMESTAMP(MICROS, UTC); Athena's timestamp reads it.
		if t.Unit != arrow.Microsecond || t.TimeZone != "UTC" {
			return "", fmt.Errorf("timestamp %s", t)
		}
		return "timestamp", nil
	case *arrow.ListType:
		elem, err := athenaType(t.Elem())
		return "array<" + elem + ">", err
	case *arrow.StructType:
		var fields []string
		for _, f := range t.Fields() {
			typ, err := athenaType(f.Type)
			if err != nil {
				return "", err
			}
			fields = append(fields, f.Name+":"+typ)
		}
		return "struct<" + strings.Join(fields, ",") + ">", nil
	}
	return "", fmt.Errorf("no Athena type for %s", dt)
}

// TestTableColumnsAreTheArchiveFiles checks the table's columns against
// the schema of a file parquetfile wrote: the same names, in the same
// order, with the Athena types that read them.
func TestTableColumnsAreTheArchiveFiles(t *testing.T) {
	got, want := readDDL(t).columns, archiveColumns(t)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("messages.sql has columns\n  %v\nthe archive file\n  %v", got, want)
	}
}

// TestTableProjectsTheDTPartitions checks that dt is the only partition,
// projected as the dates parquetfile.ObjectKey puts in its keys, under
// the table's location.
func TestTableProjectsTheDTPartitions(t *testing.T) {
	d := readDDL(t)
	if fmt.Sprint(d.partitions) != "[dt string]" || !d.storedAsParquet || d.location != "s3://BUCKET/PREFIX/" {
		t.Fatalf("partitions %v, stored as parquet %v, location %q", d.partitions, d.storedAsParquet, d.location)
	}
	for key, want := range map[string]string{
		"projection.enabled": "true", "projection.dt.type": "date", "projection.dt.format": "yyyy-MM-dd",
		"projection.dt.interval": "1", "projection.dt.interval.unit": "DAYS",
	} {
		if d.properties[key] != want {
			t.Errorf("%s = %q, want %q", key, d.properties[key], want)
		}
	}
	if r := d.properties["projection.dt.range"]; !regexp.MustCompile(`^\d{4}-\d{2}-\d{2},NOW$`).MatchString(r) {
		t.Errorf("projection.dt.range = %q, want FIRST-DAY,NOW", r)
	}
	// The partition of a file ingested on 2025-03-07 is the directory of
	// its object key, with the date the projection's format gives.
	day := time.Date(2025, 3, 7, 23, 59, 0, 0, time.UTC)
	javaToGo := strings.NewReplacer("yyyy", "2006", "MM", "01", "dd", "02")
	template := d.properties["storage.location.template"]
	location := strings.ReplaceAll(template, "${dt}", day.Format(javaToGo.Replace(d.properties["projection.dt.format"])))
	if want := "s3://BUCKET/" + path.Dir(parquetfile.ObjectKey("PREFIX", 1000, 2000, day)) + "/"; location != want {
		t.Fatalf("storage.location.template %q gives %s for the file of %s, whose key is in %s", template, location, day, want)
	}
	if !strings.HasPrefix(template, d.location) {
		t.Fatalf("storage.location.template %q is not under LOCATION %q", template, d.location)
	}
}
