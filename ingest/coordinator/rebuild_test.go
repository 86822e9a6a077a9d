package coordinator

import (
	"fmt"
	"slices"
	"testing"

	"orderlog/ingest/batch"
	"orderlog/ingest/producer"
	"orderlog/proto/orderlogpb"
)

// runEntry encodes a ledger entry holding one run of producer id: seqs
// [firstSeq, firstSeq+count) at offsets from firstOffset.
func runEntry(t *testing.T, id, firstSeq, firstOffset uint64, count int) []byte {
	t.Helper()
	records := make([]batch.Record, count)
	h := batch.Header{Kind: batch.KindRecords, FirstOffset: firstOffset, Count: uint32(count),
		Runs: []batch.ProducerRun{{ProducerID: id, Epoch: 1, FirstSeq: firstSeq, Count: uint32(count)}}}
	p, err := batch.Encode(nil, h, records)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func snapshotEntry(t *testing.T, states ...producer.State) []byte {
	t.Helper()
	p, err := batch.EncodeSnapshot(nil, 1, states)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRebuildKeepsWhatEarlierEntriesMadeDurable: a ledger's head snapshot
// that is older than the previous ledger's last entries (seqs 5..9 logged
// after it was taken) must not undo them; seq 7 keeps offset 107.
func TestRebuildKeepsWhatEarlierEntriesMadeDurable(t *testing.T) {
	const id = 3
	b := NewStateBuilder(id, 16)
	entries := [][]byte{
		snapshotEntry(t, producer.State{ID: id, Epoch: 1}), // ledger 1, entry 0
		runEntry(t, id, 0, 100, 10),                        // seqs 0..9 at 100..109
		snapshotEntry(t, producer.State{ID: id, Epoch: 1, DurableNext: 5, Window: []uint64{100, 101, 102, 103, 104}}), // ledger 2, stale
		runEntry(t, id, 10, 200, 2), // seqs 10, 11 at 200, 201
	}
	for i, e := range entries {
		if err := b.Apply(e); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	s := b.State()
	want := []uint64{100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 200, 201}
	if s.DurableNext != 12 || !slices.Equal(s.Window, want) {
		t.Fatalf("rebuilt next %d window %v, want 12 %v", s.DurableNext, s.Window, want)
	}
}

// TestRebuildRefusesAGapInSeqs: seqs missing from the replay would give
// every later seq a wrong offset in the window; the rebuild fails instead.
func TestRebuildRefusesAGapInSeqs(t *testing.T) {
	const id = 3
	b := NewStateBuilder(id, 16)
	if err := b.Apply(snapshotEntry(t, producer.State{ID: id, Epoch: 1, DurableNext: 5, Window: []uint64{0, 1, 2, 3, 4}})); err != nil {
		t.Fatal(err)
	}
	if err := b.Apply(runEntry(t, id, 10, 200, 2)); err == nil {
		t.Fatalf("a run at seq 10 after seq 4 was accepted: %+v", b.State())
	}
}

// TestRebuildKeepsRequestDigests: a bucket's rebuild takes the digests its
// snapshot holds and computes those of the keyed messages logged after it,
// exactly as RequestDigest computed them for the requests. Other
// producers' rebuilds hash nothing.
func TestRebuildKeepsRequestDigests(t *testing.T) {
	const id = 70
	requests := []*orderlogpb.Message{
		{Topic: "default", Key: []byte("user-42"), Value: []byte(`{"n":1}`), ClientTimeUs: 5},
		{Topic: "t", Value: []byte("x"), Headers: []*orderlogpb.Header{{Key: "h", Value: []byte("1")}, {Key: "h"}}},
		{Topic: "t", Value: []byte("y")},
	}
	records := make([]batch.Record, len(requests))
	for i, m := range requests {
		records[i] = batch.Record{Topic: m.Topic, Key: m.Key, Value: m.Value, ClientTimeMicros: m.ClientTimeUs,
			MessageID: fmt.Appendf(nil, "key-%d", i)}
		for _, h := range m.Headers {
			records[i].Headers = append(records[i].Headers, batch.MessageHeader{Key: h.Key, Value: h.Value})
		}
	}
	h := batch.Header{Kind: batch.KindRecords, FirstOffset: 100, Count: 3,
		Runs: []batch.ProducerRun{{ProducerID: id, Epoch: 1, FirstSeq: 1, Count: 3}}}
	entry, err := batch.Encode(nil, h, records)
	if err != nil {
		t.Fatal(err)
	}
	snapshot := snapshotEntry(t, producer.State{ID: id, Epoch: 1, DurableNext: 1, Window: []uint64{50}, Keys: []string{"old"}, Digests: []uint64{77}})
	for _, keep := range []bool{true, false} {
		b := NewStateBuilder(id, 3)
		if keep {
			b.KeepDigests()
		}
		for _, e := range [][]byte{snapshot, entry} {
			if err := b.Apply(e); err != nil {
				t.Fatal(err)
			}
		}
		s := b.State()
		want := []uint64{RequestDigest(requests[0]), RequestDigest(requests[1]), RequestDigest(requests[2])} // the window of 3 dropped "old"
		if !keep {
			want = nil
		}
		if !slices.Equal(s.Keys, []string{"key-0", "key-1", "key-2"}) || !slices.Equal(s.Digests, want) {
			t.Fatalf("keep=%v: keys %q digests %v, want %v", keep, s.Keys, s.Digests, want)
		}
	}
	b := NewStateBuilder(id, 4) // the snapshot's key and digest stay in a window of 4
	b.KeepDigests()
	for _, e := range [][]byte{snapshot, entry} {
		if err := b.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	if s := b.State(); len(s.Digests) != 4 || s.Digests[0] != 77 || s.Keys[0] != "old" || s.Digests[3] != RequestDigest(requests[2]) {
		t.Fatalf("window of 4: keys %q digests %v", s.Keys, s.Digests)
	}
	if RequestDigest(requests[1]) == RequestDigest(&orderlogpb.Message{Topic: "t", Value: []byte("x")}) {
		t.Fatal("headers do not change the digest")
	}
}
