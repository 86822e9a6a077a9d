package coordinator

import (
	"slices"
	"testing"

	"orderlog/ingest/batch"
	"orderlog/ingest/producer"
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
