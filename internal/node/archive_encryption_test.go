package node

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/ingest/retention"
	"orderlog/proto/orderlogpb"
	"orderlog/tiering"
	"orderlog/tiering/objstore"
	"orderlog/tiering/objstore/s3test"
)

// TestArchiveEncryptionLeavesNoPlaintext produces messages carrying a
// known marker (in payloads, keys and header values) through a node that
// archives, to a directory in its data directory or to a real S3 server
// (versitygw, with --s3-sse AES256), in small files and lets
// retention delete the archived ledgers; once the log start has passed
// them, a read through orderlog (served from the archive) still returns
// every message intact. Then it stops the node and greps every file under
// the data directory (WAL, etcd, the archive's Parquet and manifest, the
// block cache, the worker's directory; and the S3 server's own directory)
// for the marker: without encryption
// it is in the archive's Parquet files (so the grep can fail); with
// --encryption-key-file it is nowhere.
func TestArchiveEncryptionLeavesNoPlaintext(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keyFile, []byte("1 "+strings.Repeat("6b", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, keys string
		s3         bool
	}{{"clear", "", false}, {"encrypted", keyFile, false}, {"clear_s3", "", true}, {"encrypted_s3", keyFile, true}} {
		name, keys := tc.name, tc.keys
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			marker := fmt.Sprintf("archive-secret-%d-%s", time.Now().UnixNano(), name)
			cfg := Config{DataDir: dir, EncryptionKeyFile: keys, Ingest: ingest.Config{RollBytes: 16 << 10}, SegmentSize: 128 << 10,
				Retention: RetentionConfig{Policy: retention.Policy{Bytes: 32 << 10}, Interval: 50 * time.Millisecond, DeleteGrace: -1},
				Archive: ArchiveConfig{URL: "file://" + filepath.Join(dir, "archive"), FileBytes: 24 << 10, FileAge: 200 * time.Millisecond,
					HotWindow: time.Millisecond, Interval: 50 * time.Millisecond}}
			archiveDir := filepath.Join(dir, "archive")
			if tc.s3 {
				// The object store's own directory is greped too; SSE is
				// asked for (versitygw ignores it: the Parquet encryption
				// is what keeps the marker out).
				server := s3test.Start(t)
				server.SetEnv(t)
				cfg.Archive.URL = "s3://" + server.Bucket + "/log"
				cfg.Archive.S3 = objstore.Options{Endpoint: server.Endpoint, SSE: objstore.SSES3}
				archiveDir = filepath.Join(server.Root(), server.Bucket, "log")
			}
			s := startServerWith(t, cfg)
			closed := false
			defer func() {
				if !closed {
					s.Close()
				}
			}()
			c := dial(t, s)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			p, err := c.NewProducer(ctx, "secrets", client.ProducerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			var last uint64
			for i := range 200 {
				acks, err := p.Produce(ctx, &orderlogpb.Message{Topic: "secrets", Key: fmt.Appendf(nil, "%s-key-%d", marker, i%5),
					Value:   fmt.Appendf(nil, "%s payload %d %0300d", marker, i, i),
					Headers: []*orderlogpb.Header{{Key: "h", Value: []byte(marker + "-header")}}})
				if err != nil {
					t.Fatal(err)
				}
				last = acks[0].Offset
			}
			waitCommitted(t, c, last+1)
			waitUntil(t, 60*time.Second, "the log archived and its ledgers deleted", func() bool {
				head, err := tiering.ReadHead(ctx, s.cli)
				return err == nil && head.T > last && s.reader.LogStart() > last/2
			})
			msgs, _ := readAll(t, c)
			if len(msgs) != 200 {
				t.Fatalf("read %d messages through orderlog, want 200", len(msgs))
			}
			for i, m := range msgs {
				if want := fmt.Sprintf("%s payload %d %0300d", marker, i, i); string(m.Message.Value) != want {
					t.Fatalf("message %d: %q, want %q", i, m.Message.Value, want)
				}
			}
			s.Close()
			closed = true

			files, _ := filepath.Glob(filepath.Join(archiveDir, "dt=*", "*.parquet"))
			if len(files) < 2 {
				t.Fatalf("%d archive files, want several", len(files))
			}
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if encrypted := bytes.HasSuffix(b, []byte("PARE")); encrypted != (keys != "") {
					t.Fatalf("%s: encrypted footer %v with key file %q", f, encrypted, keys)
				}
			}
			found := grepTree(t, dir, marker)
			if tc.s3 {
				found = append(found, grepTree(t, archiveDir, marker)...)
			}
			inParquet := 0
			for _, path := range found {
				if strings.HasPrefix(path, archiveDir) && strings.HasSuffix(path, ".parquet") {
					inParquet++
				}
			}
			if keys == "" && inParquet == 0 {
				t.Fatalf("without encryption the marker is in no archive file (found in %v): the grep cannot fail", found)
			}
			if keys != "" && len(found) != 0 {
				t.Fatalf("with encryption the marker is in clear in %v", found)
			}
			t.Logf("%s: the marker is in %d files, %d of them archive Parquet", name, len(found), inParquet)
		})
	}
}

// grepTree returns the files under dir that contain s.
func grepTree(t *testing.T, dir, s string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(s)) {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}
