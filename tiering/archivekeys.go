package tiering

import (
	"bufio"
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"

	"orderlog/ingest/wal"
	"orderlog/tiering/parquetfile"
)

// archiveKeyInfo is HKDF's info for an archive key: a key of the node's
// encryption key file derives one archive key per id, distinct from the
// WAL's (the two never share a key, nor a GCM nonce space), and the same
// on every node that has the file.
const archiveKeyInfo = "orderlog archive parquet v1"

// ArchiveKeys derives the archive keys from the node's encryption key
// file (--encryption-key-file; ingest/wal's format, "<id> <64 hex
// digits>" a line): for each id, HKDF-SHA256(key, no salt, archiveKeyInfo),
// 32 bytes, under the same id; the last line's is the current key. The
// file is checked by wal.ParseKeys first, so both accept the same files
// and errors read the same; they never quote a key.
func ArchiveKeys(text []byte) (*parquetfile.Keys, error) {
	if _, err := wal.ParseKeys(text); err != nil {
		return nil, err
	}
	keys := &parquetfile.Keys{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		fields := strings.Fields(s)
		id, err := strconv.ParseUint(fields[0], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("tiering: key id %q", fields[0])
		}
		secret, err := hex.DecodeString(fields[1])
		if err != nil {
			return nil, fmt.Errorf("tiering: key %d is not hex", id)
		}
		derived, err := hkdf.Key(sha256.New, secret, nil, archiveKeyInfo, parquetfile.KeySize)
		if err != nil {
			return nil, fmt.Errorf("tiering: derive archive key %d: %w", id, err)
		}
		if err := keys.Add(uint32(id), derived); err != nil {
			return nil, err
		}
	}
	return keys, sc.Err()
}

// LoadArchiveKeys reads the key file at path and derives its archive keys
// (ArchiveKeys).
func LoadArchiveKeys(path string) (*parquetfile.Keys, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tiering: read key file: %w", err)
	}
	keys, err := ArchiveKeys(text)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return keys, nil
}
