package batch

import (
	"bytes"
	"errors"
	"testing"
)

func sampleBatch() (Header, []Record) {
	h := Header{
		Kind:             KindRecords,
		FirstOffset:      1000,
		Count:            3,
		IngestTimeMicros: 1_700_000_000_000_000,
		Runs: []ProducerRun{
			{ProducerID: 7, Epoch: 2, FirstSeq: 41, Count: 2},
			{ProducerID: 0, Count: 1},
		},
	}
	records := []Record{
		{Topic: "orders", Key: []byte("k1"), Value: []byte("v1"), ClientTimeMicros: -5,
			Headers: []MessageHeader{{"a", []byte("1")}, {"a", []byte("2")}, {"b", nil}}, MessageID: []byte("m1")},
		{Topic: "orders", Value: bytes.Repeat([]byte{0xAB}, 1024)},
		{Topic: "", Key: []byte{}, Value: nil},
	}
	return h, records
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	h, records := sampleBatch()
	buf, err := Encode(nil, h, records)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Decode(buf)
	if err != nil {
		t.Fatal(err)
	}
	if d.FirstOffset != 1000 || d.Count != 3 || d.EndOffset() != 1003 || d.IngestTimeMicros != h.IngestTimeMicros {
		t.Fatalf("header %+v", d.Header)
	}
	if len(d.Runs) != 2 || d.Runs[0] != h.Runs[0] || d.Runs[1] != h.Runs[1] {
		t.Fatalf("runs %+v", d.Runs)
	}
	got, err := d.All()
	if err != nil {
		t.Fatal(err)
	}
	assertRecordsEqual(t, got, records)
}

func TestEncodeRejectsRunsThatDoNotCoverTheRecords(t *testing.T) {
	h, records := sampleBatch()
	h.Runs[0].Count = 1
	if _, err := Encode(nil, h, records); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("got %v, want ErrCorrupt", err)
	}
	h, records = sampleBatch()
	if _, err := Encode(nil, h, records[:2]); err == nil {
		t.Fatal("count mismatch accepted")
	}
}

func TestDecodeRejectsDamage(t *testing.T) {
	h, records := sampleBatch()
	good, _ := Encode(nil, h, records)
	cases := map[string]struct {
		damage func([]byte) []byte
		want   error
	}{
		"empty":           {func(b []byte) []byte { return nil }, ErrCorrupt},
		"short_header":    {func(b []byte) []byte { return b[:headerFixedSize-1] }, ErrCorrupt},
		"future_version":  {func(b []byte) []byte { b[0] = 9; return b }, ErrVersion},
		"unknown_kind":    {func(b []byte) []byte { b[1] = 77; return b }, ErrCorrupt},
		"torn_last":       {func(b []byte) []byte { return b[:len(b)-1] }, ErrCorrupt},
		"trailing_bytes":  {func(b []byte) []byte { return append(b, 0) }, ErrCorrupt},
		"count_too_large": {func(b []byte) []byte { b[12] = 4; return b }, ErrCorrupt},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			buf := tc.damage(append([]byte(nil), good...))
			d, err := Decode(buf)
			if err == nil {
				_, err = d.All()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func assertRecordsEqual(t *testing.T, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Topic != w.Topic || !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) ||
			g.ClientTimeMicros != w.ClientTimeMicros || !bytes.Equal(g.MessageID, w.MessageID) ||
			len(g.Headers) != len(w.Headers) {
			t.Fatalf("record %d: got %+v, want %+v", i, g, w)
		}
		for j := range w.Headers {
			if g.Headers[j].Key != w.Headers[j].Key || !bytes.Equal(g.Headers[j].Value, w.Headers[j].Value) {
				t.Fatalf("record %d header %d: got %+v, want %+v", i, j, g.Headers[j], w.Headers[j])
			}
		}
	}
}
