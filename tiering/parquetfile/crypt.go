package parquetfile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/metadata"
)

// Encryption at rest (docs/format/archive.md, "Encrypted files"). A file
// written with WriterOptions.Keys is a Parquet modular encryption file,
// AES_GCM_V1, encrypted footer ("PARE" magic), every column and the footer
// under one 256-bit key: data and dictionary pages, their headers, column
// and offset indexes, bloom filters, statistics and the orderlog.* footer
// key-values. Left in clear: the FileCryptoMetaData (algorithm, the file's
// random AAD, and the footer key metadata "orderlog-archive-key:<id>"),
// and the sizes of things.

// KeyError is returned by Open for an encrypted file it cannot decrypt: no
// keys at all (NoKeys), a key id the keys lack (Missing), or a key of that
// id whose bytes do not authenticate the footer (neither set: a wrong key,
// or a damaged footer). Nothing of such a file is ever served.
type KeyError struct {
	KeyID   uint32
	NoKeys  bool
	Missing bool
	// Err is arrow-go's error for a key that does not decrypt.
	Err error
}

func (e *KeyError) Unwrap() error { return e.Err }

func (e *KeyError) Error() string {
	switch {
	case e.NoKeys:
		return fmt.Sprintf("parquetfile: the file is encrypted under archive key id %d and no encryption key file was given", e.KeyID)
	case e.Missing:
		return fmt.Sprintf("parquetfile: the file is encrypted under archive key id %d, which the encryption key file lacks", e.KeyID)
	}
	return fmt.Sprintf("parquetfile: archive key id %d does not decrypt the file's footer (a wrong key for that id, or a damaged footer): %v", e.KeyID, e.Err)
}

// Keys are the archive keys: AES-256 keys by id, and the current one new
// files are encrypted under. The zero value has none. Not safe for
// concurrent Add; safe for concurrent use once built.
type Keys struct {
	byID    map[uint32]string
	current uint32
	has     bool
}

// KeySize is the size of an archive key (AES-256).
const KeySize = 32

// Add adds key under id and makes it the current one.
func (k *Keys) Add(id uint32, key []byte) error {
	if len(key) != KeySize {
		return fmt.Errorf("parquetfile: archive key %d has %d bytes, want %d", id, len(key), KeySize)
	}
	if _, dup := k.byID[id]; dup {
		return fmt.Errorf("parquetfile: archive key id %d given twice", id)
	}
	if k.byID == nil {
		k.byID = map[uint32]string{}
	}
	k.byID[id], k.current, k.has = string(key), id, true
	return nil
}

// Current is the id of the key new files are encrypted under; false when
// there are no keys (k may be nil).
func (k *Keys) Current() (uint32, bool) {
	if k == nil {
		return 0, false
	}
	return k.current, k.has
}

// Key returns the key of id, to hand to another reader of the files (a
// DuckDB PRAGMA add_parquet_key, base64), and whether there is one.
func (k *Keys) Key(id uint32) ([]byte, bool) {
	v, ok := k.key(id)
	return []byte(v), ok
}

func (k *Keys) key(id uint32) (string, bool) {
	if k == nil {
		return "", false
	}
	v, ok := k.byID[id]
	return v, ok
}

// keyMetadataPrefix starts the footer key metadata: the key id follows in
// decimal. It is in clear, so a reader names the key it lacks.
const keyMetadataPrefix = "orderlog-archive-key:"

func keyMetadata(id uint32) string { return keyMetadataPrefix + strconv.FormatUint(uint64(id), 10) }

func parseKeyMetadata(md []byte) (uint32, error) {
	s, ok := strings.CutPrefix(string(md), keyMetadataPrefix)
	id, err := strconv.ParseUint(s, 10, 32)
	if !ok || err != nil || strconv.FormatUint(id, 10) != s {
		return 0, fmt.Errorf("%w: footer key metadata %q is not orderlog's", ErrNotArchive, md)
	}
	return uint32(id), nil
}

// encryptionProperties are a new file's: the current key for the footer
// and every column. Fresh per file (arrow-go refuses properties used by
// another file, and draws the file's random AAD here). Nil without keys.
func encryptionProperties(k *Keys) *parquet.FileEncryptionProperties {
	id, ok := k.Current()
	if !ok {
		return nil
	}
	key, _ := k.key(id)
	return parquet.NewFileEncryptionProperties(key,
		parquet.WithAlg(parquet.AesGcm), parquet.WithFooterKeyMetadata(keyMetadata(id)))
}

// magicEncrypted ends a file with an encrypted footer.
var magicEncrypted = []byte("PARE")

// footerTail is the last bytes of a file: the footer's length and magic.
const footerTail = 8

// maxFooterBytes bounds the footer read before arrow-go checks it.
const maxFooterBytes = 64 << 20

// fileTail is a file's last bytes as Open read them: the footer's length
// and magic, and for an encrypted footer the footer too. arrow-go reads
// them again when it opens the file, and a File opens it once per call
// for an encrypted one (see File.at): those reads are served from here.
type fileTail struct {
	bytes []byte // the file's last len(bytes) bytes
	size  int64  // the file's size
}

// encryption is how an encrypted file's footer and columns decrypt.
type encryption struct {
	keyID uint32
	key   string
}

// readTail reads r's tail; for a file with an encrypted footer it also
// returns the key it is under (nil for a file in clear). A key the keys
// lack is a *KeyError.
func readTail(r io.ReaderAt, size int64, keys *Keys) (*fileTail, *encryption, error) {
	if size < 12 {
		return &fileTail{size: size}, nil, nil // arrow-go says what is wrong
	}
	tail := &fileTail{bytes: make([]byte, footerTail), size: size}
	if _, err := r.ReadAt(tail.bytes, size-footerTail); err != nil && err != io.EOF {
		return nil, nil, fmt.Errorf("parquetfile: open: read the footer: %w", err)
	}
	if !bytes.Equal(tail.bytes[4:], magicEncrypted) {
		return tail, nil, nil
	}
	n := int64(binary.LittleEndian.Uint32(tail.bytes))
	if n > maxFooterBytes || n > size-footerTail-4 {
		return nil, nil, fmt.Errorf("%w: an encrypted footer of %d bytes in a file of %d", ErrCorrupt, n, size)
	}
	tail.bytes = make([]byte, n+footerTail)
	if _, err := r.ReadAt(tail.bytes, size-int64(len(tail.bytes))); err != nil && err != io.EOF {
		return nil, nil, fmt.Errorf("parquetfile: open: read the footer: %w", err)
	}
	crypto, err := metadata.NewFileCryptoMetaData(tail.bytes[:n])
	if err != nil {
		return nil, nil, fmt.Errorf("%w: file crypto metadata: %v", ErrCorrupt, err)
	}
	id, err := parseKeyMetadata(crypto.KeyMetadata())
	if err != nil {
		return nil, nil, err
	}
	key, ok := keys.key(id)
	switch {
	case keys == nil || !keys.has:
		return nil, nil, &KeyError{KeyID: id, NoKeys: true}
	case !ok:
		return nil, nil, &KeyError{KeyID: id, Missing: true}
	}
	return tail, &encryption{keyID: id, key: key}, nil
}

// readerProperties are Open's reader settings (props), with the
// decryption of an encrypted file's footer and columns. Fresh per
// arrow-go reader.
func (e *encryption) readerProperties(props parquet.ReaderProperties) *parquet.ReaderProperties {
	if e != nil {
		props.FileDecryptProps = parquet.NewFileDecryptionProperties(parquet.WithFooterKey(e.key))
	}
	return &props
}

// tailFirst serves reads of the file's tail from the tail in memory, the
// rest from the file.
type tailFirst struct {
	r    io.ReaderAt
	tail *fileTail
}

func (f tailFirst) ReadAt(p []byte, off int64) (int, error) {
	start := f.tail.size - int64(len(f.tail.bytes))
	if off >= start && off+int64(len(p)) <= f.tail.size {
		return copy(p, f.tail.bytes[off-start:]), nil
	}
	return f.r.ReadAt(p, off)
}
