package parquetfile

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"

	"orderlog/proto/orderlogpb"
)

// dataPageRanges returns the byte ranges [start, end) of every data page of
// the file's row groups groups (all when none), from its offset index.
func dataPageRanges(t *testing.T, data []byte, groups ...int) [][2]int64 {
	t.Helper()
	r, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) == 0 {
		for g := 0; g < r.NumRowGroups(); g++ {
			groups = append(groups, g)
		}
	}
	var out [][2]int64
	for _, g := range groups {
		idx, err := r.GetPageIndexReader().RowGroup(g)
		if err != nil {
			t.Fatal(err)
		}
		for leaf := 0; leaf < numLeaves; leaf++ {
			oi, err := idx.GetOffsetIndex(leaf)
			if err != nil || oi == nil {
				t.Fatalf("row group %d leaf %d: no offset index (%v)", g, leaf, err)
			}
			for _, p := range oi.GetPageLocations() {
				out = append(out, [2]int64{p.Offset, p.Offset + int64(p.CompressedPageSize)})
			}
		}
	}
	return out
}

// dataPageReads returns the reads that touched a data page.
func dataPageReads(c *countingReaderAt, pages [][2]int64) [][2]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var bad [][2]int64
	for _, r := range c.reads {
		for _, p := range pages {
			if r[0] < p[1] && p[0] < r[1] {
				bad = append(bad, r)
				break
			}
		}
	}
	return bad
}

func TestReadTouchesFewBytes(t *testing.T) {
	const first, n = 1_000_000, 200_000
	rng := rand.New(rand.NewPCG(7, 7))
	msgs := genMessages(rng, genOptions{first: first, end: first + n, holeChance: 0.01, topics: 8, payloadSize: 40, keyChance: 0.5})
	data, _ := writeFile(t, first, first+n, msgs, WriterOptions{})
	c := &countingReaderAt{data: data}
	f, err := Open(c, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Open read %d bytes in %d reads; file %d bytes, %d rows, %d row groups",
		c.bytesRead(), len(c.reads), len(data), len(msgs), len(f.RowGroups()))
	if len(f.RowGroups()) < 3 {
		t.Fatalf("%d row groups, want several", len(f.RowGroups()))
	}
	for _, from := range []uint64{first + n/2 + 1234, first + 3*n/4, first + 64*1024 - 5} {
		c.reset()
		got := readAll(t, f, from, from+10)
		equalMessages(t, "10-row read", got, inRange(msgs, from, from+10))
		distinct, total := c.bytesRead(), c.totalRead()
		t.Logf("Read [%d,+10): %d distinct bytes (%.2f%% of the file), %d with repeats, in %d reads",
			from, distinct, 100*float64(distinct)/float64(len(data)), total, len(c.reads))
		if distinct*10 >= int64(len(data)) {
			t.Fatalf("a 10-row read touched %d of %d bytes (>= 10%%)", distinct, len(data))
		}
	}
}

// topicGroups writes 4 row groups of 8192 rows whose topics are {a,c},
// {b,d}, {a,c}, {e,f}, and whose keys are "k-" and 6 digits, distinct and
// spread so that every row group's key statistics span k-000xxx..k-999xxx.
func topicGroups(t *testing.T) ([]byte, []*orderlogpb.StoredMessage) {
	t.Helper()
	const first, perGroup = 100, 8192
	const rows = 4 * perGroup
	topics := [][]string{{"a", "c"}, {"b", "d"}, {"a", "c"}, {"e", "f"}}
	rng := rand.New(rand.NewPCG(3, 3))
	var msgs []*orderlogpb.StoredMessage
	for i := 0; i < rows; i++ {
		off := uint64(first + i)
		msgs = append(msgs, &orderlogpb.StoredMessage{Offset: off, IngestTimeUs: int64(off), Message: &orderlogpb.Message{
			Topic: topics[i/perGroup][i%2],
			Key:   []byte(fmt.Sprintf("k-%06d", (i*7919)%999983)),
			Value: randBytes(rng, 100),
		}})
	}
	data, _ := writeFile(t, first, first+rows, msgs, WriterOptions{RowGroupRows: perGroup})
	return data, msgs
}

func query(t *testing.T, f *File, topic string, key []byte) []*orderlogpb.StoredMessage {
	t.Helper()
	var got []*orderlogpb.StoredMessage
	if err := f.Query(context.Background(), topic, key, func(m *orderlogpb.StoredMessage) error {
		got = append(got, m)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func filterMessages(msgs []*orderlogpb.StoredMessage, topic string, key []byte) []*orderlogpb.StoredMessage {
	var out []*orderlogpb.StoredMessage
	for _, m := range msgs {
		if matches(m, topic, key) {
			out = append(out, m)
		}
	}
	return out
}

func TestPruning(t *testing.T) {
	data, msgs := topicGroups(t)
	pages := dataPageRanges(t, data)
	c := &countingReaderAt{data: data}
	f, err := Open(c, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	absent := map[string]struct {
		topic string
		key   []byte
	}{
		// Inside every row group's key statistics: only the bloom filters rule it out.
		"key_bloom": {"", []byte("k-500000a")},
		// Inside the statistics of row groups 0 and 1: only their dictionaries rule it out.
		"topic_dictionary": {"bb", nil},
		"topic_statistics": {"g", nil},
		"topic_and_key":    {"a", msgs[10000].Message.Key}, // each exists, never together
	}
	for name, tc := range absent {
		c.reset()
		if f.MayContainKey(tc.topic, tc.key) {
			t.Errorf("%s: MayContainKey(%q, %q) = true", name, tc.topic, tc.key)
		}
		if got := query(t, f, tc.topic, tc.key); len(got) != 0 {
			t.Errorf("%s: Query found %d messages", name, len(got))
		}
		if bad := dataPageReads(c, pages); len(bad) > 0 {
			t.Errorf("%s: read data pages: %v", name, bad)
		}
		t.Logf("%s: %d bytes in %d reads", name, c.bytesRead(), len(c.reads))
	}
	for g := range f.RowGroups() {
		if !statsMayContain(f.pq.MetaData().RowGroup(g), leafKey, []byte("k-500000a")) {
			t.Fatalf("test premise: k-500000a outside row group %d's key statistics", g)
		}
	}

	present := map[string]struct {
		topic string
		key   []byte
	}{
		"key":          {"", msgs[20000].Message.Key},
		"topic":        {"b", nil},
		"topic_in_two": {"a", nil},
		"topic_key":    {"d", msgs[9001].Message.Key},
		"all":          {"", nil},
	}
	for name, tc := range present {
		if !f.MayContainKey(tc.topic, tc.key) {
			t.Errorf("%s: MayContainKey(%q, %q) = false", name, tc.topic, tc.key)
		}
		want := filterMessages(msgs, tc.topic, tc.key)
		if len(want) == 0 {
			t.Fatalf("%s: test premise: no matching message", name)
		}
		equalMessages(t, name, query(t, f, tc.topic, tc.key), want)
	}

	// A key lookup reads data pages of its row group only, and few of them.
	c.reset()
	equalMessages(t, "key lookup", query(t, f, "", msgs[20000].Message.Key), msgs[20000:20001])
	others := dataPageRanges(t, data, 0, 1, 3)
	if bad := dataPageReads(c, others); len(bad) > 0 {
		t.Errorf("key lookup read data pages of other row groups: %v", bad)
	}
	g2 := f.RowGroups()[2]
	t.Logf("key lookup: %d bytes in %d reads (its row group: %d bytes)", c.bytesRead(), len(c.reads), g2.Bytes)
	if c.bytesRead() > g2.Bytes/2 {
		t.Errorf("key lookup read %d bytes, more than half its row group's %d", c.bytesRead(), g2.Bytes)
	}
}
