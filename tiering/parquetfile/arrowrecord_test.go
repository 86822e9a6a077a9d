package parquetfile

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"orderlog/proto/orderlogpb"
)

// An Arrow record of messages holds, column by column, exactly what an
// archive file of the same messages holds when a generic Parquet reader
// (pqarrow, not this package's reader) reads it back as Arrow.
func TestArrowRecordEqualsTheFileReadAsArrow(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 1))
	msgs := genMessages(rng, genOptions{first: 100, end: 1100, holeChance: 0.1, topics: 3, payloadSize: 64, keyChance: 0.5})
	data, _ := writeFile(t, 100, 1100, msgs, WriterOptions{RowGroupRows: 256})

	rec, err := NewArrowRecord(msgs)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	if !rec.Schema().Equal(ArrowSchema()) || rec.NumRows() != int64(len(msgs)) {
		t.Fatalf("record schema %v with %d rows; want the archive's with %d", rec.Schema(), rec.NumRows(), len(msgs))
	}

	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1 << 20}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	table, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer table.Release()
	if table.NumCols() != int64(rec.NumCols()) {
		t.Fatalf("the file has %d columns, the record %d", table.NumCols(), rec.NumCols())
	}
	for i := range int(rec.NumCols()) {
		col := table.Column(i)
		if col.Name() != rec.ColumnName(i) {
			t.Fatalf("column %d: file %q, record %q", i, col.Name(), rec.ColumnName(i))
		}
		fromFile, err := array.Concatenate(col.Data().Chunks(), memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		// array.Equal compares values and types but not the list element's name
		// ("element" as Parquet reads it back, "item" in the record).
		if !array.Equal(fromFile, rec.Column(i)) {
			t.Errorf("column %q differs:\nfile   %v\nrecord %v", col.Name(), fromFile, rec.Column(i))
		}
		fromFile.Release()
	}
}

func TestArrowRecordRefusesWhatTheFormatCannotHold(t *testing.T) {
	good := &orderlogpb.StoredMessage{Offset: 1, Message: &orderlogpb.Message{Topic: "t"}}
	for name, m := range map[string]*orderlogpb.StoredMessage{
		"no_message":       {Offset: 2},
		"producer_id_2^63": {Offset: 2, ProducerId: math.MaxInt64 + 1, Message: &orderlogpb.Message{Topic: "t"}},
		"offset_2^63-1":    {Offset: math.MaxInt64, Message: &orderlogpb.Message{Topic: "t"}},
		"topic_not_utf8":   {Offset: 2, Message: &orderlogpb.Message{Topic: "\xff"}},
		"header_not_utf8":  {Offset: 2, Message: &orderlogpb.Message{Topic: "t", Headers: []*orderlogpb.Header{{Key: "\xfe"}}}},
	} {
		if rec, err := NewArrowRecord([]*orderlogpb.StoredMessage{good, m}); !errors.Is(err, ErrInvalidMessage) || rec != nil {
			t.Errorf("%s: got %v, %v; want ErrInvalidMessage and no record", name, rec, err)
		}
	}
	rec, err := NewArrowRecord(nil)
	if err != nil || rec.NumRows() != 0 || !rec.Schema().Equal(ArrowSchema()) {
		t.Fatalf("no messages: %v, %v; want an empty record of the archive's schema", rec, err)
	}
	rec.Release()
}
