package parquetfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"orderlog/proto/orderlogpb"
)

func readAll(t testing.TB, f *File, from, to uint64) []*orderlogpb.StoredMessage {
	t.Helper()
	var got []*orderlogpb.StoredMessage
	if err := f.Read(context.Background(), from, to, func(m *orderlogpb.StoredMessage) error {
		got = append(got, m)
		return nil
	}); err != nil {
		t.Fatalf("Read(%d, %d): %v", from, to, err)
	}
	return got
}

func equalMessages(t testing.TB, what string, got, want []*orderlogpb.StoredMessage) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("%s: message %d:\n got %v\nwant %v", what, i, got[i], want[i])
		}
	}
}

// inRange returns the messages with offsets in [from, to).
func inRange(msgs []*orderlogpb.StoredMessage, from, to uint64) []*orderlogpb.StoredMessage {
	var out []*orderlogpb.StoredMessage
	for _, m := range msgs {
		if m.Offset >= from && m.Offset < to {
			out = append(out, m)
		}
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	cases := map[string]struct {
		gen  genOptions
		opts WriterOptions
	}{
		"one_row_group":   {genOptions{first: 1000, end: 1500, holeChance: 0.2, topics: 3, payloadSize: 40, keyChance: 0.5}, WriterOptions{}},
		"many_row_groups": {genOptions{first: 7, end: 5007, holeChance: 0.1, topics: 5, payloadSize: 100, keyChance: 0.7}, WriterOptions{RowGroupRows: 700, BatchRows: 300}},
		"small_pages":     {genOptions{first: 0, end: 3000, holeChance: 0.05, topics: 2, payloadSize: 300, keyChance: 0.5}, WriterOptions{RowGroupRows: 1000, DataPageBytes: 4096}},
		"no_holes":        {genOptions{first: 50, end: 2050, topics: 4, payloadSize: 20, keyChance: 1}, WriterOptions{RowGroupRows: 512}},
		"mostly_holes":    {genOptions{first: 1 << 40, end: 1<<40 + 4000, holeChance: 0.97, topics: 3, payloadSize: 20, keyChance: 0.5}, WriterOptions{RowGroupRows: 16}},
		"single_offset":   {genOptions{first: 9, end: 10, topics: 1, payloadSize: 5}, WriterOptions{}},
		"only_holes":      {genOptions{first: 9, end: 100, holeChance: 1}, WriterOptions{}},
		"batch_of_one":    {genOptions{first: 0, end: 300, holeChance: 0.3, topics: 2, payloadSize: 8, keyChance: 0.5}, WriterOptions{RowGroupRows: 7, BatchRows: 1}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(len(name))))
			msgs := genMessages(rng, tc.gen)
			data, meta := writeFile(t, tc.gen.first, tc.gen.end, msgs, tc.opts)
			wantMeta := Meta{FormatVersion: 2, First: tc.gen.first, End: tc.gen.end, Holes: holesOf(tc.gen.first, tc.gen.end, msgs),
				Rows: int64(len(msgs)), Digest: digestOf(msgs)}
			if !reflect.DeepEqual(meta, wantMeta) {
				t.Fatalf("writer meta %+v, want %+v", meta, wantMeta)
			}
			f, err := Open(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(f.Meta(), meta) {
				t.Fatalf("Open meta %+v, want %+v", f.Meta(), meta)
			}
			all := readAll(t, f, 0, ^uint64(0))
			equalMessages(t, "whole file", all, msgs)
			if d := digestOf(all); d != meta.Digest {
				t.Fatalf("digest of the rows read %s, footer %s", d, meta.Digest)
			}
			checkRowGroups(t, f, msgs)
			for range 50 {
				from := tc.gen.first + rng.Uint64N(tc.gen.end-tc.gen.first+2) - 1
				to := from + rng.Uint64N(300)
				equalMessages(t, "sub-range", readAll(t, f, from, to), inRange(msgs, from, to))
			}
		})
	}
}

// checkRowGroups checks RowGroups against the messages written.
func checkRowGroups(t *testing.T, f *File, msgs []*orderlogpb.StoredMessage) {
	t.Helper()
	row := 0
	for i, g := range f.RowGroups() {
		first, last := msgs[row], msgs[row+int(g.Rows)-1]
		if g.First != first.Offset || g.End != last.Offset+1 || g.Bytes <= 0 {
			t.Fatalf("row group %d = %+v, want [%d,%d)", i, g, first.Offset, last.Offset+1)
		}
		row += int(g.Rows)
	}
	if row != len(msgs) {
		t.Fatalf("row groups hold %d rows, want %d", row, len(msgs))
	}
}

func TestAppendRejects(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, 10, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(off uint64) *orderlogpb.StoredMessage {
		return &orderlogpb.StoredMessage{Offset: off, Message: &orderlogpb.Message{Topic: "t"}}
	}
	if err := w.Append(ok(12)); err != nil {
		t.Fatal(err)
	}
	bad := map[string]struct {
		m    *orderlogpb.StoredMessage
		want error
	}{
		"below_first":      {ok(9), ErrOutOfRange},
		"2^63-1":           {ok(1<<63 - 1), ErrOutOfRange},
		"repeat":           {ok(12), ErrOutOfOrder},
		"backwards":        {ok(11), ErrOutOfOrder},
		"nil":              {nil, ErrInvalidMessage},
		"no_message":       {&orderlogpb.StoredMessage{Offset: 13}, ErrInvalidMessage},
		"producer_id_2^63": {&orderlogpb.StoredMessage{Offset: 13, Message: &orderlogpb.Message{}, ProducerId: 1 << 63}, ErrInvalidMessage},
		"seq_2^63":         {&orderlogpb.StoredMessage{Offset: 13, Message: &orderlogpb.Message{}, ProducerSeq: 1 << 63}, ErrInvalidMessage},
		"topic_not_utf8":   {&orderlogpb.StoredMessage{Offset: 13, Message: &orderlogpb.Message{Topic: "\xff"}}, ErrInvalidMessage},
		"header_not_utf8": {&orderlogpb.StoredMessage{Offset: 13, Message: &orderlogpb.Message{
			Headers: []*orderlogpb.Header{{Key: "\xc3"}}}}, ErrInvalidMessage},
	}
	for name, tc := range bad {
		if err := w.Append(tc.m); !errorsIs(err, tc.want) {
			t.Errorf("%s: Append = %v, want %v", name, err, tc.want)
		}
	}
	// A rejected row leaves the writer as it was.
	if err := w.Append(ok(19)); err != nil {
		t.Fatal(err)
	}
	// An end not above the last row is refused, and the writer stays open.
	for _, end := range []uint64{10, 19, 1<<63 + 1} {
		if _, err := w.Close(end); !errorsIs(err, ErrInvalidRange) {
			t.Errorf("Close(%d) = %v, want ErrInvalidRange", end, err)
		}
	}
	meta, err := w.Close(20)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Range{{10, 12}, {13, 19}}; !reflect.DeepEqual(meta.Holes, want) || meta.Rows != 2 {
		t.Fatalf("meta %+v, want holes %v and 2 rows", meta, want)
	}
	if err := w.Append(ok(19)); !errorsIs(err, ErrClosed) {
		t.Fatalf("Append after Close = %v", err)
	}
	if _, err := w.Close(20); !errorsIs(err, ErrClosed) {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := NewWriter(&buf, 1<<63-1, WriterOptions{}); !errorsIs(err, ErrInvalidRange) {
		t.Errorf("NewWriter(2^63-1) = %v, want ErrInvalidRange", err)
	}
	if _, err := NewWriter(&buf, 0, WriterOptions{BloomFPP: 2}); err == nil {
		t.Errorf("NewWriter with BloomFPP 2 succeeded")
	}
}

// TestReadStops: an error from fn ends Read and is returned; so does a
// cancelled context.
func TestReadStops(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	msgs := genMessages(rng, genOptions{first: 0, end: 3000, topics: 2, payloadSize: 10})
	data, _ := writeFile(t, 0, 3000, msgs, WriterOptions{})
	f, err := openBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	calls := 0
	err = f.Read(context.Background(), 0, 3000, func(*orderlogpb.StoredMessage) error {
		if calls++; calls == 3 {
			return stop
		}
		return nil
	})
	if err != stop || calls != 3 {
		t.Fatalf("Read = %v after %d calls, want stop after 3", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Read(ctx, 0, 3000, func(*orderlogpb.StoredMessage) error { return nil }); err != context.Canceled {
		t.Fatalf("Read with a cancelled context = %v", err)
	}
}

func TestWriterDoesNotCloseItsWriter(t *testing.T) {
	c := &closeRecorder{}
	w, err := NewWriter(c, 0, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(1); err != nil {
		t.Fatal(err)
	}
	if c.closed {
		t.Fatal("Writer.Close closed the io.Writer it was given")
	}
}

type closeRecorder struct {
	bytes.Buffer
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestObjectKey(t *testing.T) {
	day := mustTime(t, "2026-03-04T23:59:59.999999-02:00") // 2026-03-05 in UTC
	cases := []struct {
		prefix string
		want   string
	}{
		{"archive", "archive/dt=2026-03-05/00000000000000000100-00000000000000000199.parquet"},
		{"a/b/", "a/b/dt=2026-03-05/00000000000000000100-00000000000000000199.parquet"},
		{"", "dt=2026-03-05/00000000000000000100-00000000000000000199.parquet"},
	}
	for _, c := range cases {
		if got := ObjectKey(c.prefix, 100, 200, day); got != c.want {
			t.Errorf("ObjectKey(%q) = %q, want %q", c.prefix, got, c.want)
		}
	}
}

// TestConcurrentUse reads, queries and checks bloom filters of one File
// from several goroutines (File says it is safe for concurrent use).
func TestConcurrentUse(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	g := genOptions{first: 0, end: 6000, holeChance: 0.1, topics: 4, payloadSize: 50, keyChance: 0.5}
	msgs := genMessages(rng, g)
	data, _ := writeFile(t, g.first, g.end, msgs, WriterOptions{RowGroupRows: 1000, DataPageBytes: 4096})
	f, err := openBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for w := range 4 {
		go func() {
			errs <- func() error {
				for i := range 20 {
					from := uint64((w*1000 + i*97) % 6000)
					var n int
					if err := f.Read(context.Background(), from, from+50, func(*orderlogpb.StoredMessage) error { n++; return nil }); err != nil {
						return err
					}
					if n != len(inRange(msgs, from, from+50)) {
						return fmt.Errorf("read [%d,+50): %d messages", from, n)
					}
					f.MayContainKey("topic-1", []byte("key-7"))
					if err := f.Query(context.Background(), "topic-2", nil, func(*orderlogpb.StoredMessage) error { return nil }); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
