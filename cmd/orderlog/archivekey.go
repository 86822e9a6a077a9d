package main

import (
	"encoding/base64"
	"fmt"
	"math"
	"os"

	"orderlog/tiering"
)

// runArchiveKey prints the archive key a node derives from its encryption
// key file, base64, for another reader of the encrypted files: DuckDB's
// PRAGMA add_parquet_key (docs/format/archive.md, "Encrypted files").
func runArchiveKey(args []string) error {
	fs := newFlagSet("archive key", "archive key --encryption-key-file FILE [--id N]\n\n"+
		"Prints the archive key derived from the key file's line with id N (default:\n"+
		"the last line's, the one new files are encrypted under), base64: give it to\n"+
		"DuckDB with PRAGMA add_parquet_key. Whoever holds it reads the archive.")
	keyFile := fs.String("encryption-key-file", "", "the nodes' encryption key file (required)")
	id := fs.Int64("id", -1, "the key id (default, -1: the current key)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *keyFile == "" {
		return fmt.Errorf("--encryption-key-file is required")
	}
	if *id < -1 || *id > math.MaxUint32 {
		return fmt.Errorf("--id %d is not a key id (u32)", *id)
	}
	keys, err := tiering.LoadArchiveKeys(*keyFile)
	if err != nil {
		return err
	}
	want, _ := keys.Current()
	if *id >= 0 {
		want = uint32(*id)
	}
	key, ok := keys.Key(want)
	if !ok {
		return fmt.Errorf("the key file has no key id %d", want)
	}
	fmt.Fprintln(os.Stdout, base64.StdEncoding.EncodeToString(key))
	return nil
}
