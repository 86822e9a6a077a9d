package wal

import (
	"errors"
	"math"
	"path/filepath"
	"testing"

	"orderlog/ingest/wal/walfs"
)

// corruptionFixture writes ledgers 1 and 2, entries 0..9 interleaved
// (1/0, 2/0, 1/1, ...) into one segment, crashes (so the segment has no
// checkpoint and is scanned on open) and returns the record positions.
func corruptionFixture(t *testing.T) (*walfs.CrashFS, string, map[[2]int64]position, uint64) {
	t.Helper()
	fsys := walfs.NewCrashFS(1)
	s := openMem(t, fsys, func(c *Config) { c.SegmentSize = 1 << 20 })
	for e := int64(0); e < 10; e++ {
		mustAppend(t, s, 1, e, e+1)
		mustAppend(t, s, 2, e, e+1)
	}
	pos := map[[2]int64]position{}
	s.mu.Lock()
	for _, ledger := range []uint64{1, 2} {
		for e, p := range s.mu.idx.ledgers[ledger].entries {
			pos[[2]int64{int64(ledger), int64(e)}] = p
		}
	}
	seg := filepath.Join(testDir, segmentName(s.activeSeq))
	s.mu.Unlock()
	inc := s.Incarnation()
	fsys.Crash()
	return fsys, seg, pos, inc
}

type answer struct {
	ledger uint64
	entry  int64
	want   Status
}

func TestCorruptionTable(t *testing.T) {
	at := func(pos map[[2]int64]position, ledger, entry int64) int { return int(pos[[2]int64{ledger, entry}].off) }
	cases := map[string]struct {
		damage func(data []byte, pos map[[2]int64]position) []byte
		// removeCookie simulates a lost cookie instead of damaging bytes.
		removeCookie   bool
		wantCorrupt    int
		wantAttributed *[2]int64
		answers        []answer
		newIncarnation bool
	}{
		"torn_last_record": {
			damage:  func(d []byte, pos map[[2]int64]position) []byte { return d[:at(pos, 2, 9)+30] },
			answers: []answer{{1, 9, Present}, {2, 8, Present}, {2, 9, Absent}, {2, 10, Absent}, {3, 0, Absent}},
		},
		"truncated_header": {
			damage:  func(d []byte, pos map[[2]int64]position) []byte { return d[:at(pos, 2, 9)+5] },
			answers: []answer{{1, 9, Present}, {2, 9, Absent}, {3, 0, Absent}},
		},
		"zeroed_tail": {
			damage: func(d []byte, pos map[[2]int64]position) []byte {
				clear(d[at(pos, 2, 8)+10:])
				return d
			},
			answers: []answer{{1, 8, Present}, {2, 7, Present}, {2, 8, Absent}, {1, 9, Absent}, {2, 9, Absent}},
		},
		"bad_checksum_mid_file": {
			damage: func(d []byte, pos map[[2]int64]position) []byte {
				d[at(pos, 1, 4)+4] ^= 0xff // the crc field
				return d
			},
			wantCorrupt: 1, wantAttributed: &[2]int64{1, 4},
			// Damage may have hidden entries of any ledger: what is held is
			// Present, nothing is Absent any more.
			answers: []answer{{1, 3, Present}, {1, 4, Unknown}, {1, 5, Present}, {2, 9, Present},
				{1, 10, Unknown}, {2, 10, Unknown}, {3, 0, Unknown}},
		},
		"payload_bit_flip": {
			damage: func(d []byte, pos map[[2]int64]position) []byte {
				d[at(pos, 2, 3)+RecordHeaderSize+2] ^= 0x04
				return d
			},
			wantCorrupt: 1, wantAttributed: &[2]int64{2, 3},
			answers: []answer{{2, 2, Present}, {2, 3, Unknown}, {2, 4, Present}, {1, 9, Present}, {2, 10, Unknown}},
		},
		"length_field_flip_mid_file": {
			damage: func(d []byte, pos map[[2]int64]position) []byte {
				d[at(pos, 1, 6)+3] ^= 0x80
				return d
			},
			wantCorrupt: 1,
			answers:     []answer{{1, 5, Present}, {1, 6, Unknown}, {1, 7, Present}, {2, 6, Present}, {3, 0, Unknown}},
		},
		"missing_cookie": {
			removeCookie:   true,
			newIncarnation: true,
			// Data written by the old incarnation with valid checksums is
			// still Present; nothing of it is ever Absent.
			answers: []answer{{1, 9, Present}, {2, 0, Present}, {1, 10, Unknown}, {2, 10, Unknown}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fsys, seg, pos, inc := corruptionFixture(t)
			if tc.removeCookie {
				fsys.Remove(filepath.Join(testDir, cookieName))
			} else {
				fsys.Corrupt(seg, func(d []byte) []byte { return tc.damage(d, pos) })
			}
			s := openMem(t, fsys, nil)
			defer s.Close()
			if got := s.NewIncarnation(); got != tc.newIncarnation || (got && s.Incarnation() <= inc) {
				t.Fatalf("new incarnation = %v (%d -> %d), want %v", got, inc, s.Incarnation(), tc.newIncarnation)
			}
			if got := len(s.Corruptions()); got != tc.wantCorrupt {
				t.Fatalf("corruptions = %v, want %d", s.Corruptions(), tc.wantCorrupt)
			}
			for _, ce := range s.Corruptions() {
				if ce.Segment != filepath.Base(seg) || ce.Offset < segmentHeaderSize {
					t.Fatalf("corruption without position: %v", ce)
				}
				if tc.wantAttributed != nil {
					want := pos[*tc.wantAttributed]
					if !ce.Attributed || ce.Ledger != uint64(tc.wantAttributed[0]) || ce.Entry != tc.wantAttributed[1] || ce.Offset != int64(want.off) {
						t.Fatalf("corruption %v, want ledger/entry %v at offset %d", ce, *tc.wantAttributed, want.off)
					}
				}
			}
			for _, a := range tc.answers {
				if a.want == Present {
					expectPresent(t, s, a.ledger, a.entry)
				} else {
					expectStatus(t, s, a.ledger, a.entry, a.want)
				}
			}
			// The store keeps working: a new ledger takes appends and is
			// served.
			mustAppend(t, s, 9, 0, 3)
			expectPresent(t, s, 9, 2)
			expectStatus(t, s, 9, 3, Absent)
		})
	}
}

// TestTornTailIsTruncatedAndReappendable checks that after a torn tail the
// lost entry can be appended again and survives another reopen.
func TestTornTailIsTruncatedAndReappendable(t *testing.T) {
	fsys, seg, pos, _ := corruptionFixture(t)
	fsys.Corrupt(seg, func(d []byte) []byte { return d[:int(pos[[2]int64{2, 9}].off)+30] })
	s := openMem(t, fsys, nil)
	if got := s.LastEntry(2); got.Status != Present || got.Last != 8 {
		t.Fatalf("last entry after torn tail = %+v", got)
	}
	mustAppend(t, s, 2, 9, 12)
	s.Close()
	s = openMem(t, fsys, nil)
	defer s.Close()
	for e := int64(0); e < 12; e++ {
		expectPresent(t, s, 2, e)
	}
}

// TestCheckpointedSegmentDamage covers damage to a sealed segment whose
// checkpoint is trusted on open: the read itself notices and answers UNKNOWN.
func TestCheckpointedSegmentDamage(t *testing.T) {
	fsys, seg, pos, _ := corruptionFixture(t)
	s := openMem(t, fsys, nil) // scans and checkpoints the segment
	s.Close()
	fsys.Corrupt(seg, func(d []byte) []byte {
		d[int(pos[[2]int64{1, 2}].off)+RecordHeaderSize] ^= 1
		return d
	})
	s = openMem(t, fsys, nil)
	defer s.Close()
	if len(s.Corruptions()) != 0 {
		t.Fatalf("checkpointed segment was rescanned: %v", s.Corruptions())
	}
	r := s.Read(1, 2)
	var ce *CorruptionError
	if r.Status != Unknown || !errors.As(r.Err, &ce) || ce.Offset != int64(pos[[2]int64{1, 2}].off) {
		t.Fatalf("read of damaged entry = %v, %v", r.Status, r.Err)
	}
	expectPresent(t, s, 1, 3)
}

func TestMissingOrDamagedCheckpointIsRebuilt(t *testing.T) {
	for name, damage := range map[string]func(fsys *walfs.CrashFS, idx string){
		"missing": func(fsys *walfs.CrashFS, idx string) { fsys.Remove(idx) },
		"bit_flip": func(fsys *walfs.CrashFS, idx string) {
			fsys.Corrupt(idx, func(d []byte) []byte { d[len(d)/2] ^= 1; return d })
		},
		"stale_end": func(fsys *walfs.CrashFS, idx string) {
			fsys.Corrupt(idx, func(d []byte) []byte {
				x, _ := decodeSegmentIndex(d)
				x.end += 100
				return encodeSegmentIndex(x)
			})
		},
	} {
		t.Run(name, func(t *testing.T) {
			fsys := walfs.NewCrashFS(1)
			s := openMem(t, fsys, nil)
			mustAppend(t, s, 1, 0, 200)
			s.Close()
			names, _ := fsys.List(testDir)
			for _, n := range names {
				if _, ok := parseFileName(n, indexSuffix); ok {
					damage(fsys, filepath.Join(testDir, n))
				}
			}
			s = openMem(t, fsys, nil)
			defer s.Close()
			for e := int64(0); e < 200; e++ {
				expectPresent(t, s, 1, e)
			}
			expectStatus(t, s, 1, 200, Absent)
		})
	}
}

func TestIncarnations(t *testing.T) {
	t.Run("expected_mismatch", func(t *testing.T) {
		fsys := walfs.NewCrashFS(1)
		s := openMem(t, fsys, nil)
		inc := s.Incarnation()
		mustAppend(t, s, 1, 0, 3)
		s.Close()
		s = openMem(t, fsys, func(c *Config) { c.ExpectedIncarnation = inc + 1<<40 })
		defer s.Close()
		if !s.NewIncarnation() || s.Incarnation() <= inc+1<<40 {
			t.Fatalf("incarnation %d after expected %d", s.Incarnation(), inc+1<<40)
		}
		expectPresent(t, s, 1, 2)
		expectStatus(t, s, 1, 3, Unknown)
		if got := s.LastEntry(1); got.Status != Unknown {
			t.Fatalf("last entry of old-incarnation ledger = %+v", got)
		}
		if st, err := s.Fence(1); err != nil || st.Status != Unknown {
			t.Fatalf("fence of old-incarnation ledger = %+v, %v", st, err)
		}
	})
	t.Run("expected_match_keeps", func(t *testing.T) {
		fsys := walfs.NewCrashFS(1)
		s := openMem(t, fsys, nil)
		inc := s.Incarnation()
		s.Close()
		s = openMem(t, fsys, func(c *Config) { c.ExpectedIncarnation = inc })
		defer s.Close()
		if s.NewIncarnation() || s.Incarnation() != inc {
			t.Fatalf("incarnation changed: %d -> %d", inc, s.Incarnation())
		}
	})
	for _, tc := range []struct {
		name     string
		interval bool
		crash    bool
		fresh    bool
	}{
		{"always_crash_keeps", false, true, false},
		{"interval_clean_keeps", true, false, false},
		{"interval_crash_renews", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := walfs.NewCrashFS(1)
			mod := func(c *Config) {
				if tc.interval {
					c.SyncInterval = 1 << 40 // never by time: only fences/closes sync
				}
			}
			s := openMem(t, fsys, mod)
			inc := s.Incarnation()
			mustAppend(t, s, 1, 0, 3)
			if _, err := s.Fence(1); err != nil {
				t.Fatal(err)
			}
			if tc.crash {
				fsys.Crash()
			} else {
				s.Close()
			}
			s = openMem(t, fsys, mod)
			defer s.Close()
			if s.NewIncarnation() != tc.fresh || (s.Incarnation() == inc) == tc.fresh {
				t.Fatalf("new incarnation = %v (%d -> %d), want %v", s.NewIncarnation(), inc, s.Incarnation(), tc.fresh)
			}
		})
	}
}

// TestSegmentHeaderDamage: a last segment with a torn header is what a crash
// while creating it leaves, and is removed; a damaged header of an earlier
// segment makes the whole segment a damaged stretch.
func TestSegmentHeaderDamage(t *testing.T) {
	t.Run("torn_last_segment_header", func(t *testing.T) {
		fsys, _, _, _ := corruptionFixture(t)
		f, _ := fsys.Create(filepath.Join(testDir, segmentName(7)))
		f.Write(encodeSegmentHeader(segmentHeader{seq: 7})[:20])
		f.Sync()
		fsys.SyncDir(testDir)
		s := openMem(t, fsys, nil)
		defer s.Close()
		if len(s.Corruptions()) != 0 {
			t.Fatalf("corruptions: %v", s.Corruptions())
		}
		if _, err := fsys.Open(filepath.Join(testDir, segmentName(7))); err == nil {
			t.Fatalf("headerless last segment kept")
		}
		expectPresent(t, s, 1, 9)
		expectStatus(t, s, 1, 10, Absent)
	})
	t.Run("damaged_earlier_segment_header", func(t *testing.T) {
		fsys, seg, _, _ := corruptionFixture(t)
		s := openMem(t, fsys, nil)
		mustAppend(t, s, 3, 0, 2) // goes to a later segment
		s.Close()
		fsys.Remove(filepath.Join(testDir, indexName(0)))
		fsys.Corrupt(seg, func(d []byte) []byte { d[20] ^= 1; return d })
		s = openMem(t, fsys, nil)
		defer s.Close()
		if len(s.Corruptions()) != 1 || s.Corruptions()[0].Segment != filepath.Base(seg) {
			t.Fatalf("corruptions: %v", s.Corruptions())
		}
		expectStatus(t, s, 1, 0, Unknown)
		expectStatus(t, s, 4, 0, Unknown)
		expectPresent(t, s, 3, 1)
	})
}

// ledger 1's records all sit in a stretch the store cannot attribute, so it
// answers UNKNOWN for its entries. A recovery then reaches the store with a
// fence, or with a copy of entry 0 before any fence: either creates the
// ledger in the index again, and its entries must stay UNKNOWN, not turn
// ABSENT (an ABSENT from a store that acknowledged them could end the
// ledger below confirmed entries), also after a replay.
func TestRecoveryAfterUnattributedDamageKeepsUnknown(t *testing.T) {
	for name, reach := range map[string]func(*Store) error{
		"fence": func(s *Store) error { _, err := s.Fence(1); return err },
		"copy_of_entry_0": func(s *Store) error {
			return s.RecoveryAppend(Entry{Ledger: 1, ID: 0, LAC: -1, Payload: []byte("copy")})
		},
	} {
		t.Run(name, func(t *testing.T) {
			fsys, seg, _, _ := corruptionFixture(t)
			s := openMem(t, fsys, nil)
			mustAppend(t, s, 3, 0, 2)
			s.Close()
			fsys.Remove(filepath.Join(testDir, indexName(0)))
			fsys.Corrupt(seg, func(d []byte) []byte { d[20] ^= 1; return d })
			s = openMem(t, fsys, nil)
			expectStatus(t, s, 1, 5, Unknown)
			if err := reach(s); err != nil {
				t.Fatal(err)
			}
			expectStatus(t, s, 1, 5, Unknown)
			s.Close()
			s = openMem(t, fsys, nil)
			defer s.Close()
			expectStatus(t, s, 1, 5, Unknown)
		})
	}
}

// TestDamagedLedgerRefusesItsWriterButTakesRecoveryCopies: after damage
// that may have held entries of ledger 1 (a bad checksum mid-file), the
// store cannot answer for ledger 1's tail: its writer's appends are
// refused with ErrDamaged (the writer drops this store and rolls the
// ledger), while a recovery's copies are still taken. Before, the writer
// went on appending and a later recovery waited on the store's UNKNOWN.
func TestDamagedLedgerRefusesItsWriterButTakesRecoveryCopies(t *testing.T) {
	fsys, seg, pos, _ := corruptionFixture(t)
	fsys.Corrupt(seg, func(d []byte) []byte {
		d[int(pos[[2]int64{1, 4}].off)+4] ^= 0xff // the crc field of 1/4
		return d
	})
	s := openMem(t, fsys, nil)
	defer s.Close()
	if err := s.Append(entryFor(1, 10)); !errors.Is(err, ErrDamaged) {
		t.Fatalf("writer append to the damaged ledger: %v, want ErrDamaged", err)
	}
	if err := s.RecoveryAppend(entryFor(1, 10)); err != nil {
		t.Fatalf("recovery copy to the damaged ledger: %v", err)
	}
	expectPresent(t, s, 1, 10)
	mustAppend(t, s, 3, 0, 2) // another ledger is unaffected
}

// TestLedgersAllocatedAfterOpenAreNotHiddenByDamage: after damage it
// cannot attribute, the store answers UNKNOWN for a ledger it has no
// record of (it may have sat in the damage), but not once told that the
// ledger's id was allocated after it opened (TrustLedgersAbove): the
// damage predates that ledger, so a fence or an entry the store lacks is
// ABSENT again. Ledgers at or below the bound stay UNKNOWN. Before, every
// ledger created after a damaged restart answered UNKNOWN on that store,
// and a recovery of one whose entries never reached it waited for
// another member.
func TestLedgersAllocatedAfterOpenAreNotHiddenByDamage(t *testing.T) {
	fsys, seg, _, _ := corruptionFixture(t)
	s := openMem(t, fsys, nil)
	s.Close()
	fsys.Remove(filepath.Join(testDir, indexName(0)))
	fsys.Corrupt(seg, func(d []byte) []byte { d[20] ^= 1; return d })
	s = openMem(t, fsys, nil)
	defer s.Close()
	expectStatus(t, s, 7, 0, Unknown) // unknown ledger, bound not known yet
	if !s.MayHideLedgers() {
		t.Fatal("a damaged store does not say damage may hide ledgers")
	}
	if got := s.MayHideThrough(); got != math.MaxUint64 {
		t.Fatalf("damage with no bound yet may hide ledgers through %d, want every id", got)
	}
	mustAppend(t, s, 5, 0, 1)   // a writer's new ledger
	if s.TrustLedgersAbove(4) { // below a ledger the store holds: wrong
		t.Fatal("a bound below known ledgers was taken")
	}
	expectStatus(t, s, 7, 0, Unknown)
	if !s.TrustLedgersAbove(6) {
		t.Fatal("bound refused")
	}
	if got := s.MayHideThrough(); got != 6 {
		t.Fatalf("damage bounded at 6 may hide ledgers through %d, want 6 (the registration says so)", got)
	}
	expectStatus(t, s, 6, 0, Unknown) // allocated before the store opened
	expectStatus(t, s, 7, 0, Absent)  // allocated after
	if _, err := s.Fence(8); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, s, 8, 0, Absent)
	if st := s.LastEntry(9); st.Status != Present || st.Last != -1 {
		t.Fatalf("last entry of a new ledger: %+v", st)
	}
}

// TestACorruptClaimOfAnUnknownLedgerDoesNotBlockTheBound: a flipped byte
// in a record's ledger id makes it claim a ledger that never existed.
// That claim is as unverified as the rest of the record: the store must
// not take it for a ledger it holds, or it refuses every bound above the
// id counter (the claimed id is far above), may hide every ledger, and
// every ledger on it is rolled every second for as long as the damage is
// in its journal (chaos run c101, cycle 20).
func TestACorruptClaimOfAnUnknownLedgerDoesNotBlockTheBound(t *testing.T) {
	fsys, seg, pos, _ := corruptionFixture(t)
	s := openMem(t, fsys, nil)
	s.Close()
	fsys.Remove(filepath.Join(testDir, indexName(0)))
	ledgerIDTop := int(pos[[2]int64{2, 3}].off) + recordPrefixSize + 4 + 7
	fsys.Corrupt(seg, func(d []byte) []byte { d[ledgerIDTop] ^= 0x10; return d })
	s = openMem(t, fsys, nil)
	defer s.Close()
	if cs := s.Corruptions(); len(cs) != 1 || cs[0].Ledger == 2 {
		t.Fatalf("corruptions %v, want one claiming another ledger than 2", cs)
	}
	if !s.TrustLedgersAbove(6) {
		t.Fatal("the id counter's bound was refused for a ledger only a corrupt record claims")
	}
	if got := s.MayHideThrough(); got != 6 {
		t.Fatalf("may hide ledgers through %d, want 6", got)
	}
	expectStatus(t, s, 2, 3, Unknown) // the damaged entry's ledger stays cautious
	expectStatus(t, s, 7, 0, Absent)
}

// lostFenceFixture journals ledger 5's fence (and, with copyEntry0, a
// recovery copy of its entry 0 after it) between entries of ledger 1,
// flips a byte of the fence record's checksum, and reopens the store in
// the same incarnation with the id counter's bound trusted.
func lostFenceFixture(t *testing.T, copyEntry0 bool) *Store {
	t.Helper()
	fsys := walfs.NewCrashFS(1)
	s := openMem(t, fsys, func(c *Config) { c.SegmentSize = 1 << 20 })
	mustAppend(t, s, 1, 0, 3)
	s.mu.Lock()
	fenceAt, seq := s.mu.tail.off, s.activeSeq
	s.mu.Unlock()
	if _, err := s.Fence(5); err != nil {
		t.Fatal(err)
	}
	if copyEntry0 {
		if err := s.RecoveryAppend(entryFor(5, 0)); err != nil {
			t.Fatal(err)
		}
	}
	mustAppend(t, s, 1, 3, 6)
	inc := s.Incarnation()
	s.Close()
	fsys.Remove(filepath.Join(testDir, indexName(seq)))
	fsys.Corrupt(filepath.Join(testDir, segmentName(seq)), func(d []byte) []byte { d[int(fenceAt)+4] ^= 0xff; return d })
	s = openMem(t, fsys, func(c *Config) { c.SegmentSize = 1 << 20 })
	if s.Incarnation() != inc || len(s.Corruptions()) != 1 {
		t.Fatalf("incarnation %d (was %d), corruptions %v", s.Incarnation(), inc, s.Corruptions())
	}
	if !s.TrustLedgersAbove(10) {
		t.Fatal("bound refused")
	}
	return s
}

// TestALedgerWhoseFenceWasDamagedRefusesItsWriter: a fence the damage
// took must not let the fenced writer append again: recovery counted on
// this store being fenced, and a zombie writer reaching its ack quorum
// through it could have an acknowledged entry lost.
func TestALedgerWhoseFenceWasDamagedRefusesItsWriter(t *testing.T) {
	t.Run("fence only", func(t *testing.T) {
		s := lostFenceFixture(t, false)
		defer s.Close()
		if err := s.Append(entryFor(5, 0)); !errors.Is(err, ErrDamaged) {
			t.Fatalf("writer's append of 5/0 after its fence was damaged: %v, want ErrDamaged", err)
		}
		expectStatus(t, s, 5, 0, Unknown)
	})
	t.Run("fence, then a recovery copy", func(t *testing.T) {
		s := lostFenceFixture(t, true)
		defer s.Close()
		expectStatus(t, s, 5, 1, Unknown)
		if err := s.Append(entryFor(5, 1)); !errors.Is(err, ErrDamaged) {
			t.Fatalf("writer's append of 5/1 after its fence was damaged: %v, want ErrDamaged", err)
		}
		if err := s.RecoveryAppend(entryFor(5, 1)); err != nil {
			t.Fatalf("a recovery copy is still taken: %v", err)
		}
	})
}
