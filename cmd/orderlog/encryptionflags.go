package main

import (
	"flag"

	"orderlog/internal/node"
)

// encryptionFlags encrypt the WAL at rest (docs/operations.md,
// "Encryption at rest").
type encryptionFlags struct {
	keyFile string
}

func (f *encryptionFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.keyFile, "encryption-key-file", "",
		`encrypt WAL entry payloads with AES-256-GCM under the keys in this file: lines "<id> <64 hex digits>", the last one used for new records (empty: no encryption)`)
}

// apply maps the flags onto cfg.
func (f *encryptionFlags) apply(cfg *node.Config) { cfg.EncryptionKeyFile = f.keyFile }
