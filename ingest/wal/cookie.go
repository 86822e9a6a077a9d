package wal

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"path/filepath"
	"time"

	"orderlog/ingest/wal/walfs"
)

// Incarnation cookie file COOKIE (docs/format/wal.md §5):
//
//	0  [8]byte magic "OLWALCKE"
//	8  u32     version 1
//	12 u8      fsync policy of the run that wrote it: 0 always, 1 interval
//	13 u8      clean: 1 if written by a clean Close
//	14 u16     reserved, 0
//	16 [16]byte store id
//	32 u64     incarnation
//	40 u32     crc32c of bytes [0, 40)
const (
	cookieName    = "COOKIE"
	cookieSize    = 44
	cookieVersion = 1
)

var cookieMagic = [8]byte{'O', 'L', 'W', 'A', 'L', 'C', 'K', 'E'}

var errBadCookie = errors.New("wal: bad cookie")

type cookie struct {
	storeID     [16]byte
	incarnation uint64
	interval    bool
	clean       bool
}

func (c cookie) storeIDString() string { return hex.EncodeToString(c.storeID[:]) }

func encodeCookie(c cookie) []byte {
	b := make([]byte, 0, cookieSize)
	b = append(b, cookieMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, cookieVersion)
	b = append(b, boolByte(c.interval), boolByte(c.clean), 0, 0)
	b = append(b, c.storeID[:]...)
	b = binary.LittleEndian.AppendUint64(b, c.incarnation)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeCookie(b []byte) (cookie, error) {
	if len(b) != cookieSize || !bytes.Equal(b[:8], cookieMagic[:]) {
		return cookie{}, errBadCookie
	}
	if crc32.Checksum(b[:40], castagnoli) != binary.LittleEndian.Uint32(b[40:]) ||
		binary.LittleEndian.Uint32(b[8:]) != cookieVersion {
		return cookie{}, errBadCookie
	}
	c := cookie{interval: b[12] == 1, clean: b[13] == 1, incarnation: binary.LittleEndian.Uint64(b[32:])}
	copy(c.storeID[:], b[16:32])
	return c, nil
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// readCookie returns the cookie in dir; ok is false if it is missing or
// unreadable, both of which mean the store's identity is lost.
func readCookie(fsys walfs.FS, dir string) (c cookie, ok bool) {
	b, err := readWholeFile(fsys, filepath.Join(dir, cookieName))
	if err != nil {
		return cookie{}, false
	}
	c, err = decodeCookie(b)
	return c, err == nil
}

// decideIdentity picks the identity of this run. The incarnation changes when
// the cookie is lost, differs from what the caller expects, or was left
// behind by an unclean stop under the interval policy; a new incarnation is
// larger than the old and than the expected one, and time-based so that a
// lost cookie cannot bring an old number back.
func decideIdentity(old cookie, haveOld bool, expected uint64, now time.Time) (c cookie, fresh bool) {
	if haveOld && (expected == 0 || expected == old.incarnation) && !(old.interval && !old.clean) {
		return cookie{storeID: old.storeID, incarnation: old.incarnation}, false
	}
	c = cookie{incarnation: max(old.incarnation+1, expected+1, uint64(now.UnixNano()))}
	if haveOld {
		c.storeID = old.storeID
	} else if _, err := rand.Read(c.storeID[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return c, true
}

// writeFileAtomic replaces name with data durably: temp file, sync, rename,
// directory sync.
func writeFileAtomic(fsys walfs.FS, dir, name string, data []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return fsys.SyncDir(dir)
}

func readWholeFile(fsys walfs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, size)
	n, err := f.ReadAt(b, 0)
	if err != nil && !(errors.Is(err, io.EOF) && n == len(b)) {
		return nil, err
	}
	return b, nil
}
