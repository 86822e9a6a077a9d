package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/ingest/wal"
)

// TestEncryptionAtRestLeavesNoPlaintext produces a known payload through a
// whole in-process orderlog, reads it back intact, stops the node, and
// greps every file under the data directory (WAL segments, checkpoints,
// etcd's directory) for it: found without encryption (so the grep can
// fail), nowhere with --encryption-key-file.
func TestEncryptionAtRestLeavesNoPlaintext(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keyFile, []byte("1 "+strings.Repeat("5a", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, keys := range map[string]string{"clear": "", "encrypted": keyFile} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			value := fmt.Sprintf("secret-value-%d-%s", time.Now().UnixNano(), name)
			key := "secret-key-" + name
			s := startServerWith(t, Config{DataDir: dir, EncryptionKeyFile: keys})
			c := dial(t, s)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p, err := c.NewProducer(ctx, "enc", client.ProducerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			acks, err := p.Produce(ctx, msg("secrets", key, value), msg("secrets", key, value+"-2"))
			if err != nil {
				t.Fatal(err)
			}
			p.Close()
			waitCommitted(t, c, acks[len(acks)-1].Offset+1)
			msgs, _ := readAll(t, c)
			if len(msgs) != 2 || string(msgs[0].GetMessage().GetValue()) != value || string(msgs[0].GetMessage().GetKey()) != key {
				t.Fatalf("read back %v, want the produced messages", msgs)
			}
			s.Close()

			var found []string
			err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				if bytes.Contains(b, []byte(value)) || bytes.Contains(b, []byte(key)) {
					found = append(found, path)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if keys == "" && len(found) == 0 {
				t.Fatal("without encryption the payload is in no file: the grep cannot fail")
			}
			if keys != "" && len(found) != 0 {
				t.Fatalf("with encryption the payload is in clear in %v", found)
			}
		})
	}
}

// TestEncryptedStoreRefusesOtherKeys: a data directory written under key 1
// does not start without a key file or with a file lacking key 1, and the
// error names the key id; with the right file it starts and serves.
func TestEncryptedStoreRefusesOtherKeys(t *testing.T) {
	keyDir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(keyDir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	key1 := write("key1", "1 "+strings.Repeat("11", 32)+"\n")
	key2 := write("key2", "2 "+strings.Repeat("22", 32)+"\n")
	dir := t.TempDir()
	s := startServerWith(t, Config{DataDir: dir, EncryptionKeyFile: key1})
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := c.NewProducer(ctx, "enc", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	acks, err := p.Produce(ctx, msg("secrets", "", "under key 1"))
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	waitCommitted(t, c, acks[0].Offset+1)
	s.Close()

	for name, file := range map[string]string{"no key file": "", "other key": key2} {
		cfg := Config{DataDir: dir, EncryptionKeyFile: file, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: testLogger(t)}
		s, err := Start(cfg)
		if err == nil {
			s.Close()
			t.Fatalf("%s: the node started", name)
		}
		if !errors.As(err, new(*wal.KeyError)) || !strings.Contains(err.Error(), "key id 1") {
			t.Fatalf("%s: start = %v, want a wal.KeyError naming key id 1", name, err)
		}
	}
	s = startServerWith(t, Config{DataDir: dir, EncryptionKeyFile: key1})
	defer s.Close()
	if msgs, _ := readAll(t, dial(t, s)); len(msgs) != 1 || string(msgs[0].GetMessage().GetValue()) != "under key 1" {
		t.Fatalf("after restart read %v", msgs)
	}
}
