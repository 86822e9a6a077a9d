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
	if _, err := EncodeSnapshot(nil, 0, []producer.State{{ID: 1, DurableNext: 5, Window: []uint64{9}, Keys: []string{"a"}, Digests: []uint64{1, 2}}}); err == nil {
		t.Fatal("digests not aligned with the keys accepted")
	}
}

// A bucket's request digests travel with its keys, behind the header's
// flag; a snapshot without any keeps the layout it had before digests.
func TestSnapshotDigests(t *testing.T) {
	plain := []producer.State{{ID: 7, Epoch: 1, DurableNext: 2, Window: []uint64{5, 9}, Keys: []string{"order-1", ""}}}
	before, err := EncodeSnapshot(nil, 42, plain)
	if err != nil || before[2] != 0 {
		t.Fatalf("flags %d %v", before[2], err)
	}
	states := []producer.State{
		{ID: 1, Epoch: 3, DurableNext: 10, Window: []uint64{100, 105, 200}},
		{ID: 7, Epoch: 1, DurableNext: 2, Window: []uint64{5, 9}, Keys: []string{"order-1", ""}, Digests: []uint64{0xfeedface_00c0ffee, 0}},
	}
	buf, err := EncodeSnapshot(nil, 42, states)
	if err != nil || buf[2] != snapshotDigests {
		t.Fatalf("flags %d %v", buf[2], err)
	}
	if _, got, err := DecodeSnapshot(buf); err != nil || !reflect.DeepEqual(got, states) {
		t.Fatalf("got %+v %v", got, err)
	}
	flaggedEmpty := append([]byte(nil), before...)
	flaggedEmpty[2] = snapshotDigests
	if _, _, err := DecodeSnapshot(flaggedEmpty); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a flag without digests decoded: %v", err)
	}
	unknownFlag := append([]byte(nil), before...)
	unknownFlag[2] = 2
	if _, _, err := DecodeSnapshot(unknownFlag); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("an unknown flag decoded: %v", err)
	}
}

// FuzzDecodeSnapshot: no input panics, and what decodes re-encodes the same.
func FuzzDecodeSnapshot(f *testing.F) {
	good, _ := EncodeSnapshot(nil, 7, []producer.State{{ID: 1, Epoch: 2, DurableNext: 3, Window: []uint64{4, 6}, Keys: []string{"k", "l"}}})
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(append(append([]byte(nil), good...), 0))
	digests, _ := EncodeSnapshot(nil, 7, []producer.State{{ID: 1, DurableNext: 3, Window: []uint64{4, 6}, Keys: []string{"k", "l"}, Digests: []uint64{9, 1 << 63}},
		{ID: 2, DurableNext: 1}})
	f.Add(digests)
	f.Add(digests[:len(digests)-3])
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
