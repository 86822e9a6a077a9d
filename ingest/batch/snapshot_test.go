package batch

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"orderlog/ingest/producer"
)

func TestSnapshotRoundTripAndKindsDoNotMix(t *testing.T) {
	states := []producer.State{
		{ID: 1, Epoch: 3, DurableNext: 10, Window: []uint64{100, 105, 200}},
		{ID: 7, Epoch: 1, DurableNext: 2, Window: []uint64{5, 9}, Keys: []string{"order-1", ""}},
		{ID: 2, Epoch: 1, DurableNext: 0},
	}
	buf, err := EncodeSnapshot(nil, 42, states)
	if err != nil {
		t.Fatal(err)
	}
	if kind, _ := PeekKind(buf); kind != KindProducerSnapshot {
		t.Fatalf("kind %d", kind)
	}
	when, got, err := DecodeSnapshot(buf)
	if err != nil || when != 42 || !reflect.DeepEqual(got, states) {
		t.Fatalf("got %d %+v %v", when, got, err)
	}
	if _, err := Decode(buf); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a snapshot decoded as a record batch: %v", err)
	}
	h, records := sampleBatch()
	records2, _ := Encode(nil, h, records)
	if _, _, err := DecodeSnapshot(records2); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a record batch decoded as a snapshot: %v", err)
	}
}

func TestEncodeSnapshotRefusesImpossibleWindows(t *testing.T) {
	if _, err := EncodeSnapshot(nil, 0, []producer.State{{ID: 1, DurableNext: 1, Window: []uint64{1, 2}}}); err == nil {
		t.Fatal("window longer than the producer's history accepted")
	}
	if _, err := EncodeSnapshot(nil, 0, []producer.State{{ID: 1, DurableNext: 5, Window: []uint64{9, 9}}}); err == nil {
		t.Fatal("non-increasing window accepted")
	}
	if _, err := EncodeSnapshot(nil, 0, []producer.State{{ID: 1, DurableNext: 5, Window: []uint64{9}, Keys: []string{"a", "b"}}}); err == nil {
		t.Fatal("keys not aligned with the window accepted")
	}
}

// FuzzDecodeSnapshot: no input panics, and what decodes re-encodes the same.
func FuzzDecodeSnapshot(f *testing.F) {
	good, _ := EncodeSnapshot(nil, 7, []producer.State{{ID: 1, Epoch: 2, DurableNext: 3, Window: []uint64{4, 6}, Keys: []string{"k", "l"}}})
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(append(append([]byte(nil), good...), 0))
	f.Fuzz(func(t *testing.T, buf []byte) {
		when, states, err := DecodeSnapshot(buf)
		if err != nil {
			return
		}
		again, err := EncodeSnapshot(nil, when, states)
		if err != nil {
			t.Fatalf("decoded snapshot does not re-encode: %v", err)
		}
		if !bytes.Equal(again, buf) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, buf)
		}
	})
}
