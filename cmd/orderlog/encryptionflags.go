package main

import (
	"flag"

	"orderlog/internal/node"
)

// encryptionFlags encrypt the WAL and the archive's Parquet files at rest
// (docs/operations.md, "Encryption at rest").
type encryptionFlags struct {
	keyFile string
}

func (f *encryptionFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.keyFile, "encryption-key-file", "",
		`encrypt WAL entry payloads with AES-256-GCM, and archive files with Parquet modular encryption (keys derived by HKDF), under the keys in this file: lines "<id> <64 hex digits>", the last one used for new records and files (empty: no encryption)`)
}

// apply maps the flags onto cfg.
func (f *encryptionFlags) apply(cfg *node.Config) { cfg.EncryptionKeyFile = f.keyFile }
