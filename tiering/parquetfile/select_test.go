package parquetfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"orderlog/proto/orderlogpb"
)

// selectAll runs Select and returns the messages and the pruned ranges,
// checking that together they cover [from, to)'s rows in order.
func selectAll(t *testing.T, f *File, from, to uint64, topic string, key []byte) ([]*orderlogpb.StoredMessage, []Range) {
	t.Helper()
	var msgs []*orderlogpb.StoredMessage
	var pruned []Range
	next := from
	err := f.Select(context.Background(), from, to, topic, key, func(s Selected) error {
		m, r := s.Message, s.Skipped
		switch {
		case m != nil && (m.Offset < next || !matches(m, topic, key)):
			t.Fatalf("message at %d (after %d) that does not match or goes back", m.Offset, next)
		case m != nil:
			msgs, next = append(msgs, m), m.Offset+1
		case r.First < next || r.End <= r.First:
			t.Fatalf("pruned %v after %d", r, next)
		default:
			pruned, next = append(pruned, r), r.End
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return msgs, pruned
}

// TestSelectPrunesRowGroups: Select over part of a file hands exactly the
// matches in it, and every other row of it as pruned ranges; for a key no
// row group holds it reads no data page, only footer, bloom filters and
// dictionaries (found in review: a node's query by key read every row of
// a file that might hold the key).
func TestSelectPrunesRowGroups(t *testing.T) {
	data, msgs := topicGroups(t)
	pages := dataPageRanges(t, data)
	c := &countingReaderAt{data: data}
	f, err := Open(c, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	from, to := msgs[3000].Offset, msgs[30000].Offset
	for name, tc := range map[string]struct {
		topic string
		key   []byte
	}{
		"absent_key":   {"", []byte("k-500000a")},
		"present_key":  {"", msgs[20000].Message.Key},
		"topic":        {"b", nil},
		"absent_topic": {"g", nil},
		"all":          {"", nil},
	} {
		c.reset()
		got, pruned := selectAll(t, f, from, to, tc.topic, tc.key)
		equalMessages(t, name, got, filterMessages(inRange(msgs, from, to), tc.topic, tc.key))
		covered := uint64(len(got))
		for _, r := range pruned {
			covered += r.Len() // no holes in this file
		}
		if covered != to-from {
			t.Fatalf("%s: %d messages and pruned ranges %v cover %d of %d offsets", name, len(got), pruned, covered, to-from)
		}
		if len(got) == 0 {
			if bad := dataPageReads(c, pages); len(bad) > 0 {
				t.Fatalf("%s: nothing matches, yet data pages were read: %v", name, bad)
			}
		}
		t.Logf("%s: %d matches, %d pruned ranges, %d bytes read", name, len(got), len(pruned), c.bytesRead())
	}
}

// TestSelectPrunesPages: with keys in offset order, a key's lookup reads
// the key column's page holding it, not the row group's other pages,
// thanks to the page index's statistics.
func TestSelectPrunesPages(t *testing.T) {
	const first, rows = 0, 16384
	rng := rand.New(rand.NewPCG(9, 9))
	var msgs []*orderlogpb.StoredMessage
	for i := range rows {
		msgs = append(msgs, &orderlogpb.StoredMessage{Offset: first + uint64(i), Message: &orderlogpb.Message{
			Topic: "t", Key: fmt.Appendf(nil, "key-%08d", i), Value: randBytes(rng, 64)}})
	}
	data, _ := writeFile(t, first, first+rows, msgs, WriterOptions{RowGroupRows: rows, DataPageBytes: 4096})
	c := &countingReaderAt{data: data}
	f, err := Open(c, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	keyPages := leafPageRanges(t, data, leafKey)
	if len(keyPages) < 8 {
		t.Fatalf("test premise: the key column has %d pages", len(keyPages))
	}
	c.reset()
	got, _ := selectAll(t, f, first, first+rows, "", msgs[5000].Message.Key)
	equalMessages(t, "key lookup", got, msgs[5000:5001])
	var examined uint64
	err = f.Select(context.Background(), first, first+rows, "", msgs[5000].Message.Key, func(s Selected) error {
		if s.Examined {
			examined += s.Skipped.Len()
		}
		return nil
	})
	if err != nil || examined >= 2*rows/uint64(len(keyPages)) {
		t.Fatalf("%d rows examined of %d in %d pages: %v", examined, rows, len(keyPages), err)
	}
	c.reset()
	selectAll(t, f, first, first+rows, "", msgs[5000].Message.Key)
	if read := dataPageReads(c, keyPages); len(read) > 2 {
		t.Fatalf("read %d of the key column's %d pages: %v", len(read), len(keyPages), read)
	}
}

// leafPageRanges returns the byte ranges of leaf column leaf's data pages.
func leafPageRanges(t *testing.T, data []byte, leaf int) [][2]int64 {
	t.Helper()
	f, err := openBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]int64
	for g := range f.groups {
		idx, err := f.pq.GetPageIndexReader().RowGroup(g)
		if err != nil {
			t.Fatal(err)
		}
		oi, err := idx.GetOffsetIndex(leaf)
		if err != nil || oi == nil {
			t.Fatalf("no offset index: %v", err)
		}
		for _, p := range oi.GetPageLocations() {
			out = append(out, [2]int64{p.Offset, p.Offset + int64(p.CompressedPageSize)})
		}
	}
	return out
}

// TestCursorReadsAsRead: a cursor from any offset gives what Read gives,
// across row groups and holes, a few messages at a time.
func TestCursorReadsAsRead(t *testing.T) {
	for name, o := range map[string]WriterOptions{
		"small_row_groups":  {RowGroupRows: 900, DataPageBytes: 2048},
		"chunks_in_a_group": {RowGroupRows: 30000},
	} {
		t.Run(name, func(t *testing.T) { testCursor(t, o) })
	}
}

func testCursor(t *testing.T, o WriterOptions) {
	rng := rand.New(rand.NewPCG(11, 11))
	const end = 25500
	msgs := genMessages(rng, genOptions{first: 500, end: end, holeChance: 0.1, topics: 3, payloadSize: 80, keyChance: 0.5})
	data, _ := writeFile(t, 500, end, msgs, o)
	f, err := openBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, from := range []uint64{0, 500, 501, 1777, 9000, end - 1, end + 500} {
		c := f.Cursor(from, end)
		var got []*orderlogpb.StoredMessage
		for {
			m, err := c.Peek(ctx)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if again, _ := c.Peek(ctx); again != m {
				t.Fatal("a second Peek moved on")
			}
			got = append(got, m)
			c.Take()
		}
		c.Close()
		equalMessages(t, fmt.Sprintf("cursor from %d", from), got, inRange(msgs, from, end))
	}
	// Closed half way, with batches decoded ahead.
	c := f.Cursor(500, end)
	if _, err := c.Peek(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := c.Peek(ctx); err != io.EOF {
		t.Fatalf("Peek after Close: %v", err)
	}
}

// ctxReader is a ReaderAtContext over bytes that counts the reads made
// with a context that had ended.
type ctxReader struct {
	countingReaderAt
	afterEnd atomic.Int64
}

func (r *ctxReader) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if err := ctx.Err(); err != nil {
		r.afterEnd.Add(1)
		return 0, err
	}
	return r.ReadAt(p, off)
}

// TestReadsUseTheCallersContext: a File opened over a ReaderAtContext
// reads with the context of the call (found in review: the archive's
// block fetches went on for a reader that was gone).
func TestReadsUseTheCallersContext(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	msgs := genMessages(rng, genOptions{first: 0, end: 3000, topics: 2, payloadSize: 100, keyChance: 1})
	data, _ := writeFile(t, 0, 3000, msgs, WriterOptions{RowGroupRows: 1000})
	r := &ctxReader{countingReaderAt: countingReaderAt{data: data}}
	f, err := OpenContext(context.Background(), r, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	equalMessages(t, "read", readAll(t, f, 0, 3000), msgs)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = f.Read(ctx, 0, 3000, func(*orderlogpb.StoredMessage) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("read with an ended context: %v", err)
	}
	if err := f.Query(ctx, "", msgs[5].Message.Key, func(*orderlogpb.StoredMessage) error { return nil }); err == nil {
		t.Fatal("query with an ended context succeeded")
	}
	if r.afterEnd.Load() == 0 {
		t.Fatal("no read saw the ended context")
	}
}
