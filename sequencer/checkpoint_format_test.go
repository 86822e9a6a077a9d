package sequencer

import (
	"errors"
	"reflect"
	"testing"
)

func written(first, end, ledgerID uint64, entry int64) Record {
	return Record{Kind: KindWritten, Range: Range{first, end}, Ledger: ledgerID, Entry: entry}
}

func holeRec(first, end uint64) Record { return Record{Kind: KindHole, Range: Range{first, end}} }

// chunkSample: a run of three entries of ledger 7, a hole, two holes in a
// row (kept apart, as decided), a run of ledger 9, and ledger 7 again
// after a gap in its entries (a new run).
func chunkSample() []Record {
	return []Record{
		written(100, 105, 7, 3), written(105, 106, 7, 4), written(106, 110, 7, 5),
		holeRec(110, 200), holeRec(200, 201),
		written(201, 203, 9, 0),
		written(203, 204, 7, 9),
	}
}

func TestCheckpointChunkRoundTripAndRuns(t *testing.T) {
	segs := chunkSample()
	p := EncodeCheckpointChunk(nil, segs)
	got, err := DecodeCheckpointChunk(p)
	if err != nil || !reflect.DeepEqual(got, segs) {
		t.Fatalf("round trip: err %v\n got %v\nwant %v", err, got, segs)
	}
	// 5 runs: ledger 7 ×3, hole, hole, ledger 9, ledger 7.
	if runs := chunkRuns(segs); len(runs) != 5 {
		t.Fatalf("%d runs, want 5: %v", len(runs), runs)
	}
	// One byte per entry's offset count, not one record each.
	if len(p) > 2+2+1+5+3+3+2+5+4 {
		t.Fatalf("chunk of %d bytes: %x", len(p), p)
	}
}

func TestCheckpointIndexAndStateRoundTrip(t *testing.T) {
	ix := CheckpointIndex{Epoch: 9, Start: 100, End: 300, Holes: 95, Pages: []PageRef{
		{Ledger: 40, Entry: 5, Range: Range{100, 204}, Holes: 91, FirstLedger: 38},
		{Ledger: 41, Entry: 2, Range: Range{204, 300}, Holes: 0, FirstLedger: 40},
	}}
	got, err := DecodeCheckpointIndex(EncodeCheckpointIndex(nil, ix))
	if err != nil || !reflect.DeepEqual(got, ix) {
		t.Fatalf("index round trip: err %v\n got %+v\nwant %+v", err, got, ix)
	}
	page := []ChunkRef{{Ledger: 38, Entry: 0, Range: Range{100, 150}, Holes: 41}, {Ledger: 40, Entry: 3, Range: Range{150, 204}, Holes: 50}}
	gotPage, err := DecodeCheckpointPage(EncodeCheckpointPage(nil, page))
	if err != nil || !reflect.DeepEqual(gotPage, page) {
		t.Fatalf("page round trip: err %v\n got %+v\nwant %+v", err, gotPage, page)
	}
	st := CheckpointState{Epoch: 9, C: 310, Folded: 8, Pending: []EpochRecord{
		{Epoch: 8, Record: written(300, 305, 12, 1)}, {Epoch: 8, Record: holeRec(305, 310)}, {Epoch: 7, Record: holeRec(400, 402)},
	}}
	gotSt, err := DecodeCheckpointState(EncodeCheckpointState(nil, st))
	if err != nil || !reflect.DeepEqual(gotSt, st) {
		t.Fatalf("state round trip: err %v\n got %+v\nwant %+v", err, gotSt, st)
	}
}

func TestDecodeCheckpointCorrupt(t *testing.T) {
	chunk := EncodeCheckpointChunk(nil, chunkSample())
	index := EncodeCheckpointIndex(nil, CheckpointIndex{Epoch: 1, Start: 0, Holes: 1, Pages: []PageRef{{Ledger: 4, Range: Range{0, 10}, Holes: 1, FirstLedger: 3}}})
	page := EncodeCheckpointPage(nil, []ChunkRef{{Ledger: 3, Range: Range{0, 4}}, {Ledger: 4, Entry: 1, Range: Range{4, 10}, Holes: 1}})
	state := EncodeCheckpointState(nil, CheckpointState{Epoch: 1, C: 10, Pending: []EpochRecord{{Epoch: 1, Record: holeRec(10, 11)}}})
	cases := map[string]struct {
		p      []byte
		decode func([]byte) error
	}{
		"chunk_empty":          {nil, decodeChunkErr},
		"chunk_bad_version":    {append([]byte{2}, chunk[1:]...), decodeChunkErr},
		"chunk_wrong_kind":     {index, decodeChunkErr},
		"chunk_torn":           {chunk[:len(chunk)-1], decodeChunkErr},
		"chunk_trailing_bytes": {append(append([]byte{}, chunk...), 0), decodeChunkErr},
		// Two runs that should be one: ledger 7 entries 0 and 1.
		"chunk_split_run":   {[]byte{1, 1, 0, 2, runWritten, 7, 0, 1, 1, runWritten, 7, 1, 1, 1}, decodeChunkErr},
		"chunk_zero_length": {[]byte{1, 1, 0, 1, runHole, 0}, decodeChunkErr},
		"chunk_wrapping":    {append([]byte{1, 1, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1, runHole}, 5), decodeChunkErr},
		"chunk_unknown_run": {[]byte{1, 1, 0, 1, 9, 1}, decodeChunkErr},
		"index_torn":        {index[:len(index)-1], decodeIndexErr},
		"index_too_many_holes": {EncodeCheckpointIndex(nil, CheckpointIndex{Start: 0, Holes: 11, Pages: []PageRef{{Ledger: 4, Range: Range{0, 10}, Holes: 11}}}),
			decodeIndexErr},
		"index_ledgers_going_back": {EncodeCheckpointIndex(nil, CheckpointIndex{Pages: []PageRef{
			{Ledger: 4, Range: Range{0, 10}, FirstLedger: 4}, {Ledger: 5, Range: Range{10, 20}, FirstLedger: 3}}}), decodeIndexErr},
		"page_torn":               {page[:len(page)-1], decodePageErr},
		"page_empty":              {EncodeCheckpointPage(nil, nil), decodePageErr},
		"page_wrong_kind":         {index, decodePageErr},
		"page_going_back":         {EncodeCheckpointPage(nil, []ChunkRef{{Ledger: 4, Range: Range{0, 4}}, {Ledger: 3, Range: Range{4, 5}}}), decodePageErr},
		"page_holes_excess":       {EncodeCheckpointPage(nil, []ChunkRef{{Ledger: 4, Range: Range{0, 4}, Holes: 5}}), decodePageErr},
		"index_holes_below_start": {EncodeCheckpointIndex(nil, CheckpointIndex{Start: 5, Holes: 6}), decodeIndexErr},
		"state_torn":              {state[:len(state)-1], decodeStateErr},
		"state_watermark": {EncodeCheckpointState(nil, CheckpointState{Pending: []EpochRecord{{Record: Record{Kind: KindWatermark, Watermark: 3}}}}),
			decodeStateErr},
		"state_huge_count": {append(state[:10:10], 0xff, 0xff, 0xff, 0xff, 0x0f), decodeStateErr},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if err := tc.decode(tc.p); !errors.Is(err, ErrCorruptCheckpoint) {
				t.Fatalf("err = %v, want ErrCorruptCheckpoint", err)
			}
		})
	}
}

func decodeChunkErr(p []byte) error { _, err := DecodeCheckpointChunk(p); return err }
func decodeIndexErr(p []byte) error { _, err := DecodeCheckpointIndex(p); return err }
func decodeStateErr(p []byte) error { _, err := DecodeCheckpointState(p); return err }
func decodePageErr(p []byte) error  { _, err := DecodeCheckpointPage(p); return err }

// Whatever decodes must encode back to the same bytes: every checkpoint
// entry has exactly one reading.
func FuzzDecodeCheckpointChunk(f *testing.F) {
	f.Add(EncodeCheckpointChunk(nil, chunkSample()))
	f.Add(EncodeCheckpointChunk(nil, nil))
	f.Add([]byte{1, 1, 0, 0xff, 0xff, 0x03})
	f.Fuzz(func(t *testing.T, p []byte) {
		segs, err := DecodeCheckpointChunk(p)
		if err != nil {
			return
		}
		if again := EncodeCheckpointChunk(nil, segs); string(again) != string(p) {
			t.Fatalf("re-encoding differs: %x vs %x", again, p)
		}
	})
}

func FuzzDecodeCheckpointIndex(f *testing.F) {
	f.Add(EncodeCheckpointIndex(nil, CheckpointIndex{Epoch: 3, Start: 5, Holes: 7, Pages: []PageRef{{Ledger: 4, Entry: 1, Range: Range{5, 20}, Holes: 2, FirstLedger: 2}}}))
	f.Add([]byte{1, 3})
	f.Fuzz(func(t *testing.T, p []byte) {
		ix, err := DecodeCheckpointIndex(p)
		if err != nil {
			return
		}
		if again := EncodeCheckpointIndex(nil, ix); string(again) != string(p) {
			t.Fatalf("re-encoding differs: %x vs %x", again, p)
		}
	})
}

func FuzzDecodeCheckpointState(f *testing.F) {
	f.Add(EncodeCheckpointState(nil, CheckpointState{Epoch: 2, C: 9, Folded: 2, Pending: []EpochRecord{{Epoch: 2, Record: written(9, 12, 3, 4)}}}))
	f.Add([]byte{1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff})
	f.Fuzz(func(t *testing.T, p []byte) {
		st, err := DecodeCheckpointState(p)
		if err != nil {
			return
		}
		if again := EncodeCheckpointState(nil, st); string(again) != string(p) {
			t.Fatalf("re-encoding differs: %x vs %x", again, p)
		}
	})
}

func FuzzDecodeCheckpointPage(f *testing.F) {
	f.Add(EncodeCheckpointPage(nil, []ChunkRef{{Ledger: 3, Range: Range{7, 9}}, {Ledger: 4, Entry: 2, Range: Range{9, 30}, Holes: 4}}))
	f.Add([]byte{1, 4, 0, 0xff, 0xff, 0x03})
	f.Fuzz(func(t *testing.T, p []byte) {
		chunks, err := DecodeCheckpointPage(p)
		if err != nil {
			return
		}
		if again := EncodeCheckpointPage(nil, chunks); string(again) != string(p) {
			t.Fatalf("re-encoding differs: %x vs %x", again, p)
		}
	})
}
