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
