package parquetfile

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"orderlog/proto/orderlogpb"
)

// serialWrite writes msgs as the Writer's file of [first, end) on one
// goroutine: each batch of BatchRows rows encoded as soon as it is
// collected, then the footer the Writer returned (meta). The Writer
// encodes its batches on another goroutine while it collects the next; the
// file must not change for it.
func serialWrite(t *testing.T, msgs []*orderlogpb.StoredMessage, meta Meta, o WriterOptions) []byte {
	t.Helper()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(archiveSchema, &buf, writerProperties(o), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	rows := newRowBuilder()
	defer rows.release()
	flush := func() {
		rec := rows.newRecord()
		defer rec.Release()
		if err := fw.WriteBuffered(rec); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range msgs {
		rows.append(m, 0)
		if (i+1)%o.BatchRows == 0 {
			flush()
		}
	}
	if len(msgs)%o.BatchRows != 0 {
		flush()
	}
	for i, v := range footerValues(meta) {
		if err := fw.AppendKeyValueMetadata(footerKeys[i], v); err != nil {
			t.Fatal(err)
		}
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestWriterBytesAreSerial: the Writer's file is byte for byte the one
// its batches make encoded one after another as they are collected, for
// row groups, batches and pages of several sizes, with holes and without
// rows; and its digest is the rows'.
func TestWriterBytesAreSerial(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 17))
	g := genOptions{first: 1000, end: 21000, holeChance: 0.1, topics: 5, payloadSize: 400, keyChance: 0.7}
	msgs := genMessages(rng, g)
	bench, _ := benchRows(10_000)
	cases := map[string]struct {
		msgs       []*orderlogpb.StoredMessage
		first, end uint64
		o          WriterOptions
	}{
		"default":          {msgs, g.first, g.end, WriterOptions{}},
		"small_groups":     {msgs, g.first, g.end, WriterOptions{RowGroupRows: 1000, BatchRows: 300, DataPageBytes: 4096}},
		"batch_of_one":     {msgs[:500], g.first, g.end, WriterOptions{RowGroupRows: 64, BatchRows: 1}},
		"batch_over_group": {msgs, g.first, g.end, WriterOptions{RowGroupRows: 1500, BatchRows: 4000}},
		"1KiB_payloads":    {bench, bench[0].Offset, bench[len(bench)-1].Offset + 1, WriterOptions{}},
		"no_rows":          {nil, 5, 9, WriterOptions{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			data, meta := writeFile(t, tc.first, tc.end, tc.msgs, tc.o)
			if want := serialWrite(t, tc.msgs, meta, tc.o); !bytes.Equal(data, want) {
				t.Fatalf("the Writer's file (%d bytes) differs from the serial encoding (%d bytes)", len(data), len(want))
			}
			if meta.Digest != digestOf(tc.msgs) {
				t.Errorf("digest %s, the rows' %s", meta.Digest, digestOf(tc.msgs))
			}
			if waited := writeWaiting(t, tc.first, tc.end, tc.msgs, tc.o, 777); !bytes.Equal(waited, data) {
				t.Errorf("with Wait every 777 rows the file differs")
			}
		})
	}
}

// writeWaiting is writeFile calling Wait every n rows.
func writeWaiting(t *testing.T, first, end uint64, msgs []*orderlogpb.StoredMessage, o WriterOptions, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, first, o)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		if err := w.Append(m); err != nil {
			t.Fatal(err)
		}
		if i%n == 0 {
			if err := w.Wait(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := w.Close(end); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// failingWriter fails every write after the first n bytes.
type failingWriter struct{ n int }

var errDiskFull = errors.New("test: disk full")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		return 0, errDiskFull
	}
	w.n -= len(p)
	return len(p), nil
}

// TestWriterWriteFails: a failed write, which happens while a batch is
// encoded behind Append, is returned by a later Append or by Close, and
// the writer is closed from then on.
func TestWriterWriteFails(t *testing.T) {
	bench, _ := benchRows(3000)
	first := bench[0].Offset
	w, err := NewWriter(&failingWriter{n: 1000}, first, WriterOptions{RowGroupRows: 500, BatchRows: 100})
	if err != nil {
		t.Fatal(err)
	}
	var failed error
	for _, m := range bench {
		if failed = w.Append(m); failed != nil {
			break
		}
	}
	if failed == nil {
		_, failed = w.Close(first + 3000)
	}
	if !errors.Is(failed, errDiskFull) {
		t.Fatalf("writing 3000 rows to a full disk: %v, want the write's error", failed)
	}
	if err := w.Append(bench[len(bench)-1]); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after a failed write: %v, want ErrClosed", err)
	}
	if _, err := w.Close(first + 3000); !errors.Is(err, ErrClosed) {
		t.Errorf("Close after a failed write: %v, want ErrClosed", err)
	}
	if err := w.Wait(); !errors.Is(err, ErrClosed) {
		t.Errorf("Wait after a failed write: %v, want ErrClosed", err)
	}
}
