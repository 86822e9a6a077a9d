package sequencer

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

func TestCommitEntryRoundTrip(t *testing.T) {
	records := []Record{
		{Kind: KindWritten, Range: Range{0, 5}, Ledger: 7, Entry: 3},
		{Kind: KindHole, Range: Range{5, 9}},
		{Kind: KindWatermark, Watermark: 9},
		{Kind: KindWritten, Range: Range{1 << 60, 1<<60 + 1}, Ledger: 1 << 40, Entry: 1 << 50},
	}
	p := EncodeCommitEntry(nil, 42, records)
	epoch, got, err := DecodeCommitEntry(p)
	if err != nil || epoch != 42 || !reflect.DeepEqual(got, records) {
		t.Fatalf("round trip: epoch %d err %v\n got %v\nwant %v", epoch, err, got, records)
	}
}

func TestDecodeCommitEntryCorrupt(t *testing.T) {
	good := EncodeCommitEntry(nil, 3, []Record{{Kind: KindHole, Range: Range{10, 20}}, {Kind: KindWatermark, Watermark: 20}})
	cases := map[string][]byte{
		"empty":          {},
		"bad_version":    append([]byte{2}, good[1:]...),
		"torn_epoch":     good[:5],
		"torn_record":    good[:len(good)-1],
		"trailing_bytes": append(append([]byte{}, good...), 0),
		"unknown_kind":   EncodeCommitEntry(nil, 3, []Record{{Kind: 9}}),
		"empty_range":    EncodeCommitEntry(nil, 3, []Record{{Kind: KindHole, Range: Range{4, 4}}}),
		"huge_count":     append(good[:9], 0xff, 0xff, 0xff, 0xff, 0x0f),
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			if _, _, err := DecodeCommitEntry(p); !errors.Is(err, ErrCorruptCommitEntry) {
				t.Fatalf("err = %v, want ErrCorruptCommitEntry", err)
			}
		})
	}
}

func FuzzDecodeCommitEntry(f *testing.F) {
	f.Add(EncodeCommitEntry(nil, 1, []Record{{Kind: KindWritten, Range: Range{0, 3}, Ledger: 2, Entry: 0}, {Kind: KindWatermark, Watermark: 3}}))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		epoch, records, err := DecodeCommitEntry(p)
		if err != nil {
			return
		}
		// Whatever decodes must encode back to the same bytes.
		if again := EncodeCommitEntry(nil, epoch, records); string(again) != string(p) {
			t.Fatalf("re-encoding differs: %x vs %x", again, p)
		}
	})
}

func TestReplayKeepsHighestWatermark(t *testing.T) {
	e1 := EncodeCommitEntry(nil, 5, []Record{{Kind: KindHole, Range: Range{0, 4}}, {Kind: KindWatermark, Watermark: 4}})
	e2 := EncodeCommitEntry(nil, 9, []Record{{Kind: KindWritten, Range: Range{4, 6}, Ledger: 3, Entry: 1}, {Kind: KindWatermark, Watermark: 6}})
	cm, err := Replay([][]byte{e1, e2})
	if err != nil || cm.C != 6 || cm.Epoch != 9 || len(cm.Records) != 2 || cm.Records[1].Epoch != 9 {
		t.Fatalf("replay = %+v, %v", cm, err)
	}
	if _, err := Replay([][]byte{e1, e2[:3]}); !errors.Is(err, ErrCorruptCommitEntry) {
		t.Fatalf("torn entry: err = %v", err)
	}
}

// TestReplayDropsOlderEpochsRecordsAboveC: epoch 5 confirmed Hole[59,61)
// (an unused grant) while C was still 10; epoch 6 took over at C₀ = 10 and
// decided [10, 110) again as one hole. A replay, and the records a new
// leader serves from it, must hold only one decision per offset: readers
// refuse overlapping records, and C would stop for good at 10.
func TestReplayDropsOlderEpochsRecordsAboveC(t *testing.T) {
	e5a := EncodeCommitEntry(nil, 5, []Record{{Kind: KindWritten, Range: Range{0, 10}, Ledger: 7, Entry: 0}, {Kind: KindWatermark, Watermark: 10}})
	e5b := EncodeCommitEntry(nil, 5, []Record{{Kind: KindHole, Range: Range{59, 61}}})
	e6 := EncodeCommitEntry(nil, 6, []Record{{Kind: KindHole, Range: Range{10, 110}}, {Kind: KindWatermark, Watermark: 110}})

	epoch5, err := Replay([][]byte{e5a, e5b})
	if err != nil || epoch5.C != 10 || len(epoch5.Records) != 2 {
		t.Fatalf("epoch 5 replay = %+v, %v", epoch5, err)
	}
	// What epoch 6 serves from its replay: below C₀ only.
	if settled := epoch5.Settled(); len(settled) != 1 || settled[0].Range != (Range{0, 10}) {
		t.Fatalf("settled = %+v, want only Written[0,10)", settled)
	}
	if len(epoch5.Records) != 2 {
		t.Fatalf("Settled changed the replay's records: %+v", epoch5.Records)
	}

	// What epoch 7 replays: both epochs, one decision per offset.
	both, err := Replay([][]byte{e5a, e5b, e6})
	if err != nil || both.C != 110 || both.Epoch != 6 {
		t.Fatalf("replay = %+v, %v", both, err)
	}
	want := []EpochRecord{
		{Epoch: 5, Record: Record{Kind: KindWritten, Range: Range{0, 10}, Ledger: 7, Entry: 0}},
		{Epoch: 6, Record: Record{Kind: KindHole, Range: Range{10, 110}}},
	}
	if !slices.Equal(both.Records, want) {
		t.Fatalf("records = %+v, want %+v", both.Records, want)
	}
}

// The byte example in docs/format/commit-log.md.
func TestCommitEntryDocumentedExample(t *testing.T) {
	got := EncodeCommitEntry(nil, 7, []Record{
		{Kind: KindWritten, Range: Range{100, 105}, Ledger: 12, Entry: 3},
		{Kind: KindHole, Range: Range{105, 108}},
		{Kind: KindWatermark, Watermark: 108},
	})
	want := []byte{1, 7, 0, 0, 0, 0, 0, 0, 0, 3, 1, 0x64, 5, 0x0c, 3, 2, 0x69, 3, 3, 0x6c}
	if string(got) != string(want) {
		t.Fatalf("encoding\n got % x\nwant % x", got, want)
	}
}
