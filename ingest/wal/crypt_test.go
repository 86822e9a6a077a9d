package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"sync"
	"testing"

	"orderlog/ingest/wal/walfs"
)

const (
	testKey1 = "1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	testKey2 = "2 202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
	// testKey1Other has key 1's id and other bytes.
	testKey1Other = "1 ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"
)

func mustKeys(t *testing.T, lines ...string) *Keys {
	t.Helper()
	k, err := ParseKeys([]byte(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func withKeys(k *Keys) func(*Config) { return func(c *Config) { c.Keys = k } }

// journalBytes returns the concatenated segment files of the store.
func journalBytes(t *testing.T, fsys *walfs.CrashFS) []byte {
	t.Helper()
	names, err := fsys.List(testDir)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, name := range names {
		fsys.Corrupt(testDir+"/"+name, func(d []byte) []byte { all = append(all, d...); return d })
	}
	return all
}

// rawEntry returns the entry's record as it is on disk.
func rawEntry(t *testing.T, s *Store, ledger uint64, entry int64) (Record, position) {
	t.Helper()
	s.mu.Lock()
	pos := s.mu.idx.ledgers[ledger].entries[entry]
	s.mu.Unlock()
	r, _, err := s.readRaw(pos)
	if err != nil {
		t.Fatal(err)
	}
	return r, pos
}

func TestEncryptedRoundTrip(t *testing.T) {
	for name, keys := range map[string]*Keys{"clear": nil, "encrypted": mustKeys(t, testKey1)} {
		t.Run(name, func(t *testing.T) {
			fsys := walfs.NewCrashFS(1)
			s := openMem(t, fsys, withKeys(keys))
			mustAppend(t, s, 7, 0, 50) // more than one 4 KiB segment
			for e := int64(0); e < 50; e++ {
				expectPresent(t, s, 7, e)
			}
			if err := s.Append(entryFor(7, 3)); err != nil {
				t.Fatalf("identical re-append: %v", err) // compared with the plaintext
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openMem(t, fsys, withKeys(keys))
			for e := int64(0); e < 50; e++ {
				expectPresent(t, s, 7, e)
			}
			r, _ := rawEntry(t, s, 7, 0)
			found := bytes.Contains(journalBytes(t, fsys), payloadFor(7, 12))
			if keys == nil && (!found || r.Flags != 0) {
				t.Fatalf("clear store: payload found %v, flags %#x", found, r.Flags)
			}
			if keys != nil && (found || r.Flags != flagEncrypted) {
				t.Fatalf("encrypted store: payload found %v in the journal, flags %#x", found, r.Flags)
			}
		})
	}
}

// TestEncryptedTamperedPayloadIsUnknown alters a sealed payload and fixes
// up the record's checksum: the read answers UNKNOWN with ErrDecrypt, and
// no bytes.
func TestEncryptedTamperedPayloadIsUnknown(t *testing.T) {
	for name, damage := range map[string]func(payload []byte){
		"ciphertext": func(p []byte) { p[keyIDSize+nonceSize] ^= 1 },
		"tag":        func(p []byte) { p[len(p)-1] ^= 0x80 },
		"nonce":      func(p []byte) { p[keyIDSize] ^= 1 },
	} {
		t.Run(name, func(t *testing.T) {
			fsys := walfs.NewCrashFS(1)
			keys := mustKeys(t, testKey1)
			s := openMem(t, fsys, withKeys(keys))
			mustAppend(t, s, 3, 0, 3)
			_, pos := rawEntry(t, s, 3, 1)
			s.Close()
			fsys.Corrupt(testDir+"/"+segmentName(pos.seg), func(d []byte) []byte {
				rec := d[pos.off : pos.off+pos.size]
				damage(rec[RecordHeaderSize:])
				binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(rec[recordPrefixSize:], castagnoli))
				return d
			})
			s = openMem(t, fsys, withKeys(keys)) // entries 0 and 2 still authenticate
			got := s.Read(3, 1)
			if got.Status != Unknown || got.Payload != nil || !errors.Is(got.Err, ErrDecrypt) {
				t.Fatalf("read of tampered entry = %v %q err %v, want UNKNOWN with ErrDecrypt", got.Status, got.Payload, got.Err)
			}
			expectPresent(t, s, 3, 0)
			expectPresent(t, s, 3, 2)
		})
	}
}

// TestEncryptedRecordCannotMove copies a sealed payload (with its record
// header rewritten and the checksum fixed up) to another entry id: the
// header is the additional data, so it does not open.
func TestEncryptedRecordCannotMove(t *testing.T) {
	fsys := walfs.NewCrashFS(1)
	keys := mustKeys(t, testKey1)
	s := openMem(t, fsys, withKeys(keys))
	mustAppend(t, s, 3, 0, 3)
	_, from := rawEntry(t, s, 3, 0)
	_, to := rawEntry(t, s, 3, 1)
	s.Close()
	fsys.Corrupt(testDir+"/"+segmentName(from.seg), func(d []byte) []byte {
		src, dst := d[from.off:from.off+from.size], d[to.off:to.off+to.size]
		copy(dst[RecordHeaderSize:], src[RecordHeaderSize:]) // same lengths: same payload sizes
		binary.LittleEndian.PutUint32(dst[4:], crc32.Checksum(dst[recordPrefixSize:], castagnoli))
		return d
	})
	s = openMem(t, fsys, withKeys(keys))
	if got := s.Read(3, 1); got.Status != Unknown || !errors.Is(got.Err, ErrDecrypt) {
		t.Fatalf("moved payload read = %v %q err %v, want UNKNOWN with ErrDecrypt", got.Status, got.Payload, got.Err)
	}
}

func TestEncryptedOpenRefusesWrongKeys(t *testing.T) {
	cases := map[string]struct {
		keys *Keys
		want KeyError
		text []string
	}{
		"unknown_key_id": {mustKeys(t, testKey2), KeyError{KeyID: 1, Missing: true}, []string{"key id 1", "not in the encryption key file"}},
		"wrong_key":      {mustKeys(t, testKey1Other), KeyError{KeyID: 1}, []string{"key id 1", "does not decrypt", "wrong key"}},
		"no_key_file":    {nil, KeyError{KeyID: 1, Missing: true, NoKeys: true}, []string{"key id 1", "no encryption key file"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fsys := walfs.NewCrashFS(1)
			s := openMem(t, fsys, withKeys(mustKeys(t, testKey1)))
			mustAppend(t, s, 5, 0, 4)
			seg := segmentName(s.activeSeq)
			s.Close()
			_, err := Open(Config{Dir: testDir, FS: fsys, SegmentSize: 4 << 10, Keys: tc.keys})
			var ke *KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("open = %v, want a *KeyError", err)
			}
			want := tc.want
			want.Segment = seg
			if *ke != want {
				t.Fatalf("open = %+v, want %+v", *ke, want)
			}
			for _, text := range append(tc.text, seg) {
				if !strings.Contains(err.Error(), text) {
					t.Errorf("error %q does not say %q", err, text)
				}
			}
			// The refusal left the store as it was: the right key opens it.
			s = openMem(t, fsys, withKeys(mustKeys(t, testKey1)))
			expectPresent(t, s, 5, 3)
		})
	}
}

// TestEncryptionKeyRotation turns encryption on for a store written in
// clear, then adds key 2: every record stays readable under the file that
// holds the keys it was written with, new records use the last key, and a
// file without key 1 is refused while records sealed under it remain.
func TestEncryptionKeyRotation(t *testing.T) {
	fsys := walfs.NewCrashFS(1)
	s := openMem(t, fsys, nil)
	mustAppend(t, s, 1, 0, 3) // in clear
	s.Close()
	s = openMem(t, fsys, withKeys(mustKeys(t, testKey1)))
	mustAppend(t, s, 1, 3, 6) // key 1
	s.Close()
	both := mustKeys(t, testKey1, testKey2)
	if both.CurrentID() != 2 {
		t.Fatalf("current key id %d, want the last line's, 2", both.CurrentID())
	}
	s = openMem(t, fsys, withKeys(both))
	mustAppend(t, s, 1, 6, 9) // key 2
	for e, want := range map[int64]uint32{0: 0, 3: 1, 6: 2} {
		r, _ := rawEntry(t, s, 1, e)
		id, _ := sealedKeyID(r.Payload)
		if r.Flags&flagEncrypted == 0 {
			id = 0
		}
		if id != want {
			t.Errorf("entry %d sealed under key %d, want %d", e, id, want)
		}
	}
	s.Close()
	s = openMem(t, fsys, withKeys(both))
	for e := int64(0); e < 9; e++ {
		expectPresent(t, s, 1, e)
	}
	s.Close()
	_, err := Open(Config{Dir: testDir, FS: fsys, SegmentSize: 4 << 10, Keys: mustKeys(t, testKey2)})
	var ke *KeyError
	if !errors.As(err, &ke) || ke.KeyID != 1 || !ke.Missing {
		t.Fatalf("open without key 1 = %v, want a *KeyError for key id 1", err)
	}
}

func TestParseKeys(t *testing.T) {
	hex64 := strings.Repeat("ab", 32)
	bad := map[string]string{
		"empty":         "",
		"comments_only": "# nothing\n\n",
		"short_key":     "1 " + hex64[:62],
		"long_key":      "1 " + hex64 + "ab",
		"not_hex":       "1 " + strings.Repeat("zz", 32),
		"bad_id":        "x " + hex64,
		"negative_id":   "-1 " + hex64,
		"id_too_big":    "4294967296 " + hex64,
		"one_field":     hex64,
		"three_fields":  "1 " + hex64 + " extra",
		"duplicate_id":  "1 " + hex64 + "\n1 " + strings.Repeat("cd", 32),
	}
	for name, text := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := ParseKeys([]byte(text))
			if err == nil {
				t.Fatalf("ParseKeys(%q) = nil error", text)
			}
			if strings.Contains(err.Error(), "abab") || strings.Contains(err.Error(), "cdcd") {
				t.Fatalf("error quotes key material: %v", err)
			}
		})
	}
	k, err := ParseKeys([]byte("# rotated 2026-12\n7 " + hex64 + "\n\n  4294967295 " + strings.Repeat("CD", 32) + "  \n"))
	if err != nil || k.CurrentID() != 4294967295 || len(k.aeads) != 2 {
		t.Fatalf("ParseKeys = %v, %v", k, err)
	}
}

func TestDecodeRejectsUnknownFlags(t *testing.T) {
	for name, r := range map[string]Record{
		"unknown_bit":       {Type: RecordEntry, Flags: 1 << 1, Payload: []byte("x")},
		"encrypted_a_fence": {Type: RecordFence, Flags: flagEncrypted},
	} {
		t.Run(name, func(t *testing.T) {
			b := append(appendRecordHeader(nil, &r), r.Payload...)
			if _, _, err := decodeRecord(b); !errors.Is(err, errBadFlags) {
				t.Fatalf("decode = %v, want errBadFlags", err)
			}
		})
	}
}

// TestEncryptedConcurrentAppenders seals from many goroutines at once (the
// nonce source and the seal buffers are shared) and reads every entry back.
func TestEncryptedConcurrentAppenders(t *testing.T) {
	fsys := walfs.NewCrashFS(1)
	s := openMem(t, fsys, withKeys(mustKeys(t, testKey1)))
	var wg sync.WaitGroup
	for ledger := uint64(1); ledger <= 8; ledger++ {
		wg.Go(func() {
			for e := int64(0); e < 40; e++ {
				if err := s.Append(entryFor(ledger, e)); err != nil {
					t.Errorf("append %d/%d: %v", ledger, e, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for ledger := uint64(1); ledger <= 8; ledger++ {
		for e := int64(0); e < 40; e++ {
			expectPresent(t, s, ledger, e)
		}
	}
}

// FuzzOpenSealed: opening arbitrary bytes as a sealed payload never panics
// and never succeeds unless they were sealed under the key and header.
func FuzzOpenSealed(f *testing.F) {
	keys, err := ParseKeys([]byte(testKey1))
	if err != nil {
		f.Fatal(err)
	}
	r := Record{Type: RecordEntry, Flags: flagEncrypted, Ledger: 1, Entry: 2}
	header := appendRecordHeader(nil, &r)
	f.Add(keys.seal(nil, header, []byte("hello")), false)
	f.Add([]byte{1, 0, 0, 0}, true)
	f.Add(make([]byte, sealedOverhead), true)
	f.Fuzz(func(t *testing.T, sealed []byte, flip bool) {
		if flip && len(sealed) > 0 {
			sealed[len(sealed)/2] ^= 1
		}
		plain, err := keys.open(header, bytes.Clone(sealed))
		if err == nil && !bytes.Equal(plain, []byte("hello")) {
			t.Fatalf("opened %q", plain)
		}
	})
}

func FuzzParseKeys(f *testing.F) {
	f.Add([]byte(testKey1 + "\n" + testKey2))
	f.Add([]byte("# c\n\n1 zz"))
	f.Fuzz(func(t *testing.T, text []byte) {
		if k, err := ParseKeys(text); err == nil && k.aead(k.CurrentID()) == nil {
			t.Fatal("the current key has no cipher")
		}
	})
}
