package wal

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Encryption at rest (docs/format/wal.md §2.1). An entry record's payload
// is sealed with AES-256-GCM when the store has keys:
//
//	0  u32      key id
//	4  [12]byte nonce, random
//	16 ...      ciphertext, then the 16-byte GCM tag
//
// The additional data is the record's header bytes [8, 52) (version, type,
// flags, ledger, entry, span, lac), so a sealed payload moved to another
// record, ledger or entry id does not open. The record's flags carry
// flagEncrypted. Fence, close and delete records have no payload and stay
// in clear.
const (
	flagEncrypted  = 1 << 0
	knownFlags     = flagEncrypted
	keyIDSize      = 4
	nonceSize      = 12
	tagSize        = 16
	sealedOverhead = keyIDSize + nonceSize + tagSize
	keySize        = 32 // AES-256
)

// ErrDecrypt is the cause (in a *CorruptionError from a read) when a sealed
// payload does not authenticate: it was altered on disk. It is never served.
var ErrDecrypt = errors.New("wal: encrypted payload does not authenticate")

// KeyError is returned by Open when the journal holds records encrypted
// under a key id the key file lacks, or under a key the file has with other
// bytes, or encrypted records and no key file at all.
type KeyError struct {
	KeyID   uint32
	Segment string
	// Missing: the key id is not in the key file (or there is none);
	// otherwise the key's bytes do not decrypt the segment's records.
	Missing bool
	// NoKeys: the store was opened without keys.
	NoKeys bool
}

func (e *KeyError) Error() string {
	switch {
	case e.NoKeys:
		return fmt.Sprintf("wal: segment %s holds records encrypted under key id %d, and no encryption key file was given", e.Segment, e.KeyID)
	case e.Missing:
		return fmt.Sprintf("wal: segment %s holds records encrypted under key id %d, which is not in the encryption key file", e.Segment, e.KeyID)
	}
	return fmt.Sprintf("wal: key id %d of the encryption key file does not decrypt the records of segment %s (wrong key)", e.KeyID, e.Segment)
}

// Keys are the AES-256-GCM keys of a store: every key id the journal may
// hold records under, and the current one new records are sealed with.
// Safe for concurrent use.
type Keys struct {
	aeads   map[uint32]cipher.AEAD
	current uint32
	sealer  cipher.AEAD
}

// ParseKeys parses a key file: one key a line, "<id> <64 hex digits>",
// id a decimal u32; blank lines and lines starting with '#' are ignored.
// The last key is the current one; the others are kept for reading.
func ParseKeys(text []byte) (*Keys, error) {
	k := &Keys{aeads: map[uint32]cipher.AEAD{}}
	sc := bufio.NewScanner(bytes.NewReader(text))
	line, found := 0, false
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		id, aead, err := parseKeyLine(s)
		if err != nil {
			return nil, fmt.Errorf("wal: key file line %d: %w", line, err)
		}
		if _, dup := k.aeads[id]; dup {
			return nil, fmt.Errorf("wal: key file line %d: key id %d given twice", line, id)
		}
		k.aeads[id], k.current, k.sealer, found = aead, id, aead, true
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("wal: key file: %w", err)
	}
	if !found {
		return nil, errors.New("wal: key file holds no key")
	}
	return k, nil
}

// parseKeyLine parses "<id> <64 hex digits>". Errors never quote the key.
func parseKeyLine(s string) (uint32, cipher.AEAD, error) {
	fields := strings.Fields(s)
	if len(fields) != 2 {
		return 0, nil, errors.New(`want "<id> <64 hex digits>"`)
	}
	id, err := strconv.ParseUint(fields[0], 10, 32)
	if err != nil {
		return 0, nil, fmt.Errorf("key id %q is not a decimal u32", fields[0])
	}
	key, err := hex.DecodeString(fields[1])
	if err != nil || len(key) != keySize {
		return 0, nil, fmt.Errorf("key %d: want %d hex digits (AES-256)", id, 2*keySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return 0, nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return 0, nil, err
	}
	return uint32(id), aead, nil
}

// LoadKeyFile reads and parses the key file at path.
func LoadKeyFile(path string) (*Keys, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("wal: read key file: %w", err)
	}
	k, err := ParseKeys(text)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return k, nil
}

// CurrentID is the id of the key new records are sealed with.
func (k *Keys) CurrentID() uint32 { return k.current }

// nonceSource hands out random nonces, reading the system's random source
// 4 KiB at a time rather than once per record (a syscall each).
type nonceSource struct {
	mu   sync.Mutex
	buf  [4096]byte
	next int
}

var nonces = nonceSource{next: 4096}

func (n *nonceSource) fill(dst []byte) {
	n.mu.Lock()
	if n.next+len(dst) > len(n.buf) {
		if _, err := rand.Read(n.buf[:]); err != nil {
			panic(err) // crypto/rand never fails on supported systems
		}
		n.next = 0
	}
	copy(dst, n.buf[n.next:])
	clear(n.buf[n.next : n.next+len(dst)]) // a nonce is used once
	n.next += len(dst)
	n.mu.Unlock()
}

// seal appends the sealed form of plaintext to dst. header is the record's
// header as appendRecordHeader builds it (its bytes [8, 52) are the
// additional data; length and checksum are not, they depend on the result).
func (k *Keys) seal(dst, header, plaintext []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, k.current)
	start := len(dst)
	dst = append(dst, make([]byte, nonceSize)...)
	nonce := dst[start:]
	nonces.fill(nonce)
	return k.sealer.Seal(dst, nonce, plaintext, header[recordPrefixSize:RecordHeaderSize])
}

// open returns the plaintext of a sealed payload, decrypted in place (it
// overwrites sealed). header is the record's encoded header.
func (k *Keys) open(header, sealed []byte) ([]byte, error) {
	if len(sealed) < sealedOverhead {
		return nil, ErrDecrypt
	}
	id := binary.LittleEndian.Uint32(sealed)
	aead := k.aead(id)
	if aead == nil {
		return nil, &KeyError{KeyID: id, Missing: true}
	}
	nonce, ciphertext := sealed[keyIDSize:keyIDSize+nonceSize], sealed[keyIDSize+nonceSize:]
	plain, err := aead.Open(ciphertext[:0], nonce, ciphertext, header[recordPrefixSize:RecordHeaderSize])
	if err != nil {
		return nil, ErrDecrypt
	}
	return plain, nil
}

func (k *Keys) aead(id uint32) cipher.AEAD {
	if k == nil {
		return nil
	}
	return k.aeads[id]
}

// sealedKeyID is the key id of a sealed payload, if it is long enough to
// hold one.
func sealedKeyID(payload []byte) (uint32, bool) {
	if len(payload) < sealedOverhead {
		return 0, false
	}
	return binary.LittleEndian.Uint32(payload), true
}
