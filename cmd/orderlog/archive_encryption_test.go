package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orderlog/client"
	"orderlog/internal/node"
	"orderlog/tiering"
)

// TestArchiveVerifyEncrypted runs `orderlog dev --encryption-key-file`,
// which encrypts the archive's files, and checks that `archive verify`
// without the key file fails naming the key id, and with it verifies
// every file.
func TestArchiveVerifyEncrypted(t *testing.T) {
	srv := newDevProcess(t)
	keyFile := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keyFile, []byte("3 "+strings.Repeat("3c", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	etcdAddr := freeAddr(t)
	archiveDir := filepath.Join(srv.dataDir, "archive")
	archive := "file://" + archiveDir
	srv.cmd = startChild(t, srv.log, append([]string{"dev", "--data", srv.dataDir, "--grpc-addr", srv.grpcAddr,
		"--http-addr", srv.httpAddr, "--etcd-addr", etcdAddr, "--archive", archive, "--encryption-key-file", keyFile},
		archiveCLIDevFlags...)...)
	c, err := client.Dial(srv.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv.waitReady(c)
	last := produceArchiveMessages(t, c, 6, 500)
	st := waitArchived(t, c, archive, etcdAddr, last+1)
	srv.stop()

	without := runArchiveCLI(t, "verify", "--archive", archive)
	if without.exit != 1 || !strings.Contains(without.stdout+without.stderr, "encrypted under archive key id 3 and no encryption key file was given") {
		t.Fatalf("verify without the key file: exit %d\n%s%s", without.exit, without.stdout, without.stderr)
	}
	printed := runArchiveCLI(t, "key", "--encryption-key-file", keyFile).ok(t, "archive key")
	keys, err := tiering.LoadArchiveKeys(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if key, _ := keys.Key(3); printed != base64.StdEncoding.EncodeToString(key)+"\n" {
		t.Errorf("archive key printed %q, want key 3's base64", printed)
	}
	if r := runArchiveCLI(t, "key", "--encryption-key-file", keyFile, "--id", "4"); r.exit == 0 || !strings.Contains(r.stderr, "no key id 4") {
		t.Errorf("archive key --id 4: exit %d, %s", r.exit, r.stderr)
	}
	with := runArchiveCLI(t, "verify", "--archive", archive, "--encryption-key-file", keyFile).ok(t, "verify with the key file")
	if !strings.Contains(with, fmt.Sprintf("verified %d files", st.Files)) || !strings.HasSuffix(with, "OK\n") {
		t.Fatalf("verify with the key file printed:\n%s", with)
	}
}

// TestArchiveSSEFlags: --s3-sse maps onto the S3 options, and is refused
// for a file archive, with an unknown value, or a KMS key id without
// aws:kms.
func TestArchiveSSEFlags(t *testing.T) {
	cases := []struct {
		url, sse, kmsKey string
		want             string // the options' SSE, or "error"
	}{
		{"s3://b/p", "none", "", ""},
		{"s3://b/p", "AES256", "", "AES256"},
		{"s3://b/p", "aws:kms", "arn:k", "aws:kms"},
		{"file:///tmp/a", "AES256", "", "error"},
		{"s3://b/p", "aes256", "", "error"},
		{"s3://b/p", "AES256", "arn:k", "error"},
	}
	for _, c := range cases {
		f := archiveFlags{url: c.url, fileBytes: 1, fileAge: 1, hotWindow: 1, sse: c.sse, sseKMSKey: c.kmsKey}
		var cfg node.Config
		err := f.apply(&cfg)
		switch {
		case c.want == "error" && err == nil:
			t.Errorf("%+v: accepted", c)
		case c.want != "error" && (err != nil || cfg.Archive.S3.SSE != c.want || cfg.Archive.S3.SSEKMSKeyID != c.kmsKey):
			t.Errorf("%+v: %v, SSE %q key %q", c, err, cfg.Archive.S3.SSE, cfg.Archive.S3.SSEKMSKeyID)
		}
	}
}

// TestArchiveFlagsRefused: a flag that means nothing in its combination is
// refused, not silently ignored: the S3 encryption flags and
// --archive-plaintext without an archive, --archive-plaintext without
// --encryption-key-file.
func TestArchiveFlagsRefused(t *testing.T) {
	cases := map[string]struct {
		flags   archiveFlags
		keyFile string
		want    string // in the error; "" accepted
	}{
		"sse_without_archive":       {flags: archiveFlags{sse: "AES256"}, want: "--s3-sse AES256 needs"},
		"sse_with_archive_none":     {flags: archiveFlags{url: noArchive, sse: "aws:kms"}, want: "--s3-sse aws:kms needs"},
		"kms_key_without_archive":   {flags: archiveFlags{sse: "none", sseKMSKey: "arn:k"}, want: "--s3-sse-kms-key-id needs"},
		"plaintext_without_archive": {flags: archiveFlags{sse: "none", plaintext: true}, keyFile: "k", want: "--archive-plaintext needs an --archive"},
		"plaintext_without_key":     {flags: archiveFlags{url: "file:///tmp/a", sse: "none", plaintext: true}, want: "needs --encryption-key-file"},
		"plaintext_with_key":        {flags: archiveFlags{url: "file:///tmp/a", sse: "none", plaintext: true}, keyFile: "k"},
		"no_archive_defaults":       {flags: archiveFlags{sse: "none"}},
	}
	for name, c := range cases {
		c.flags.fileBytes, c.flags.fileAge, c.flags.hotWindow = 1, 1, 1
		cfg := node.Config{EncryptionKeyFile: c.keyFile}
		err := c.flags.apply(&cfg)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one with %q", name, err, c.want)
		}
	}
}

// TestArchiveKeyNegativeID: `archive key --id -2` is refused, not taken
// for the default (the current key).
func TestArchiveKeyNegativeID(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keyFile, []byte("3 "+strings.Repeat("3c", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := runArchiveKey([]string{"--encryption-key-file", keyFile, "--id", "-2"})
	if err == nil || !strings.Contains(err.Error(), "--id -2 is not a key id") {
		t.Errorf("archive key --id -2: %v", err)
	}
}
