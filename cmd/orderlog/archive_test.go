package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
)

// archiveCLIDevFlags make a dev process archive small files soon and
// keep little on its disk: a file is cut at 32 KiB or 300 ms after its
// first message, the log keeps 64 KiB (ledgers roll at 16 KiB), so the
// log start passes the older files while the newer ones are still in the
// log. The hot window is a minute, not a second: with one second,
// retention deletes every archived ledger a second or two after the
// archive takes it, and verify --grpc would find nothing to compare.
var archiveCLIDevFlags = []string{
	"--archive-file-bytes", "32KiB", "--archive-file-age", "300ms", "--archive-hot-window", "1m",
	"--retention-bytes", "64KiB", "--ledger-roll-bytes", "16KiB",
}

// cliRun is one run of `orderlog archive ...`.
type cliRun struct {
	stdout, stderr string
	exit           int
}

// runArchiveCLI runs the test binary as `orderlog archive args...`.
func runArchiveCLI(t *testing.T, args ...string) cliRun {
	t.Helper()
	return runCLI(t, append([]string{"archive"}, args...)...)
}

// runCLI runs the test binary as `orderlog args...` to its end.
func runCLI(t *testing.T, args ...string) cliRun {
	t.Helper()
	return runCLIInput(t, "", args...)
}

// runCLIInput is runCLI with input on the command's stdin.
func runCLIInput(t *testing.T, input string, args ...string) cliRun {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Stdin = strings.NewReader(input)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	run := cliRun{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		run.exit = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return run
}

// ok fails the test unless the run exited 0; it returns stdout.
func (r cliRun) ok(t *testing.T, what string) string {
	t.Helper()
	if r.exit != 0 {
		t.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", what, r.exit, r.stdout, r.stderr)
	}
	return r.stdout
}

// produceArchiveMessages sends n messages through each of sessions
// producer sessions in turn (each session writes ledgers of its own, so
// retention can delete the older ones), with keys, headers, message ids
// and client times on two topics; the last offset.
func produceArchiveMessages(t *testing.T, c *client.Client, sessions, n int) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last uint64
	for s := range sessions {
		p, err := c.NewProducer(ctx, fmt.Sprintf("archive-cli-%d", s), client.ProducerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var batch []*orderlogpb.Message
		for i := range n {
			m := &orderlogpb.Message{Topic: []string{"orders", "payments"}[i%2], Value: fmt.Appendf(nil, "session %d message %d %s", s, i, strings.Repeat("x", i%50))}
			if i%3 != 0 {
				m.Key = fmt.Appendf(nil, "key-%d", i%7)
			}
			if i%4 == 0 {
				m.Headers = []*orderlogpb.Header{{Key: "trace", Value: fmt.Appendf(nil, "%d", i)}, {Key: "empty"}}
			}
			if i%5 == 0 {
				m.MessageId, m.ClientTimeUs = fmt.Appendf(nil, "id-%d-%d", s, i), time.Now().UnixMicro()
			}
			batch = append(batch, m)
		}
		for len(batch) > 0 {
			k := min(len(batch), 50)
			acks, err := p.Produce(ctx, batch[:k]...)
			if err != nil {
				t.Fatal(err)
			}
			last = max(last, acks[len(acks)-1].Offset)
			batch = batch[k:]
		}
		p.Close()
	}
	return last
}

// archiveStatusJSON runs status --json.
func archiveStatusJSON(t *testing.T, args ...string) archiveStatus {
	t.Helper()
	out := runArchiveCLI(t, append([]string{"status", "--json"}, args...)...).ok(t, "archive status")
	var st archiveStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return st
}

// waitArchived waits until the head's T reaches end and the log start
// has moved (retention deleted the first ledgers).
func waitArchived(t *testing.T, c *client.Client, archive, etcd string, end uint64) archiveStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := archiveStatusJSON(t, "--archive", archive, "--etcd", etcd)
		status, err := c.Status(context.Background())
		if st.Head != nil && st.Head.T >= end && err == nil && status.LogStart > 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("T did not reach %d or the log start did not move: head %+v, status %v (%v)", end, st.Head, status, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestArchiveCLIOnALiveArchive runs a real `orderlog dev` that archives
// to a directory, and checks archive status, ls and verify on it: status
// with --etcd shows T reaching the last offset + 1, ls lists several
// files in offset order, verify passes without --etcd, with it, and with
// --grpc, where it compares the files above the log start with the log
// (and skips those below).
func TestArchiveCLIOnALiveArchive(t *testing.T) {
	srv := newDevProcess(t)
	etcdAddr := freeAddr(t)
	archiveDir := filepath.Join(srv.dataDir, "archive")
	archive := "file://" + archiveDir
	srv.cmd = startChild(t, srv.log, append([]string{"dev", "--data", srv.dataDir, "--grpc-addr", srv.grpcAddr,
		"--http-addr", srv.httpAddr, "--etcd-addr", etcdAddr, "--archive", archive}, archiveCLIDevFlags...)...)
	c, err := client.Dial(srv.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv.waitReady(c)

	firstDay := time.Now().UTC().Format(time.DateOnly)
	last := produceArchiveMessages(t, c, 6, 500)
	st := waitArchived(t, c, archive, etcdAddr, last+1)
	if today := time.Now().UTC().Format(time.DateOnly); st.Files < 4 || st.Rows != int64(last+1) || st.First != 0 || st.Last != last ||
		st.Head.Files != int64(st.Files) || st.NewestDT != today && st.NewestDT != firstDay {
		t.Fatalf("status: %+v, head %+v; want ≥ 4 files, %d rows, offsets 0..%d, today's dt", st, st.Head, last+1, last)
	}
	checkLs(t, archive, st)

	plain := runArchiveCLI(t, "verify", "--archive", archive).ok(t, "verify")
	if !strings.Contains(plain, fmt.Sprintf("verified %d files", st.Files)) || !strings.HasSuffix(plain, "OK\n") {
		t.Fatalf("verify printed:\n%s", plain)
	}
	runArchiveCLI(t, "verify", "--archive", archive, "--etcd", etcdAddr).ok(t, "verify --etcd")
	withLog := runArchiveCLI(t, "verify", "--archive", archive, "--etcd", etcdAddr, "--grpc", srv.grpcAddr, "--json", "--progress", "2")
	var sum verifySummary
	if err := json.Unmarshal([]byte(withLog.ok(t, "verify --grpc")), &sum); err != nil {
		t.Fatal(err)
	}
	if !sum.OK || sum.ComparedFiles == 0 || sum.BelowLogStart == 0 || sum.ComparedFiles+sum.BelowLogStart != st.Files ||
		sum.ComparedMessages == 0 || strings.Count(withLog.stderr, "files,") != st.Files/2 {
		t.Fatalf("verify --grpc: %+v\nstderr:\n%s", sum, withLog.stderr)
	}
	t.Logf("%d files, log start %d: %d compared with the log (%d messages), %d below its start",
		st.Files, *sum.LogStart, sum.ComparedFiles, sum.ComparedMessages, sum.BelowLogStart)

	srv.stop()
	checkVerifyFindsDamage(t, archiveDir)
}

// checkLs checks that ls lists the files status counts, in offset order
// and contiguous, and that --from starts at the file holding the offset.
func checkLs(t *testing.T, archive string, st archiveStatus) {
	t.Helper()
	out := runArchiveCLI(t, "ls", "--archive", archive, "--json").ok(t, "ls")
	var files []lsEntry
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e lsEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("ls --json line %q: %v", line, err)
		}
		files = append(files, e)
	}
	if len(files) != st.Files {
		t.Fatalf("ls lists %d files, status counts %d", len(files), st.Files)
	}
	for i, f := range files {
		if i > 0 && (f.First != files[i-1].End || objectDT(f.Object) < objectDT(files[i-1].Object)) ||
			f.Rows+int64(f.HoleOffsets) != int64(f.End-f.First) || objectDT(f.Object) == "" {
			t.Fatalf("ls line %d: %+v (before: %+v)", i, f, files[max(i-1, 0)])
		}
	}
	text := runArchiveCLI(t, "ls", "--archive", archive, "--from", fmt.Sprint(files[2].First+1)).ok(t, "ls --from")
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != len(files)-2+1 || !strings.HasSuffix(lines[1], files[2].Object) {
		t.Fatalf("ls --from %d printed:\n%s", files[2].First+1, text)
	}
}

// archiveDamage damages a copy of an archive, and returns what verify's
// report must name.
type archiveDamage func(t *testing.T, dir string, segments []string) string

// checkVerifyFindsDamage damages copies of the stopped server's archive
// one way each and checks that verify exits 1 naming the damaged part.
func checkVerifyFindsDamage(t *testing.T, archiveDir string) {
	segments, err := filepath.Glob(filepath.Join(archiveDir, "_manifest", "*.json"))
	if err != nil || len(segments) < 4 {
		t.Fatalf("segments: %v, %v", segments, err)
	}
	for i := range segments {
		segments[i] = filepath.Join("_manifest", filepath.Base(segments[i]))
	}
	for name, damage := range map[string]archiveDamage{
		"segment_digest_changed": func(t *testing.T, dir string, segments []string) string {
			rewrite(t, filepath.Join(dir, segments[1]), regexp.MustCompile(`"digest":"sha256:[0-9a-f]{64}"`),
				`"digest":"sha256:`+strings.Repeat("0", 64)+`"`)
			return segments[1]
		},
		"segment_not_json": func(t *testing.T, dir string, segments []string) string {
			rewrite(t, filepath.Join(dir, segments[2]), regexp.MustCompile(`\}\s*$`), "")
			return segments[2]
		},
		"segment_missing": func(t *testing.T, dir string, segments []string) string {
			if err := os.Remove(filepath.Join(dir, segments[1])); err != nil {
				t.Fatal(err)
			}
			return segments[2] // the file after the gap
		},
		"object_replaced_by_another": func(t *testing.T, dir string, segments []string) string {
			first, second := segmentObject(t, dir, segments[0]), segmentObject(t, dir, segments[1])
			replaceFile(t, filepath.Join(dir, second), filepath.Join(dir, first))
			return first
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, archiveDir, dir)
			clean := runArchiveCLI(t, "verify", "--archive", "file://"+dir)
			clean.ok(t, "verify before the damage")
			named := damage(t, dir, segments)
			run := runArchiveCLI(t, "verify", "--archive", "file://"+dir)
			if run.exit != 1 || !strings.Contains(run.stderr, "orderlog archive: ") || !strings.Contains(run.stderr, named) ||
				!strings.Contains(run.stdout, "MISMATCHES") {
				t.Fatalf("verify after %s: exit %d, want 1 naming %s\nstdout:\n%s\nstderr:\n%s", name, run.exit, named, run.stdout, run.stderr)
			}
		})
	}
}

// rewrite replaces what re matches in the file (which must match).
func rewrite(t *testing.T, path string, re *regexp.Regexp, with string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !re.Match(b) {
		t.Fatalf("%s: nothing matches %s in %s", path, re, b)
	}
	if err := os.WriteFile(path, re.ReplaceAll(b, []byte(with)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// segmentObject is the object key a segment names.
func segmentObject(t *testing.T, dir, segment string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, segment))
	if err != nil {
		t.Fatal(err)
	}
	var e struct{ Object string }
	if err := json.Unmarshal(b, &e); err != nil || e.Object == "" {
		t.Fatalf("%s: %v", segment, err)
	}
	return e.Object
}

func replaceFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyTree copies the files under from to to (the object store's
// staging directory .tmp excepted).
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		switch {
		case d.IsDir() && rel == ".tmp":
			return filepath.SkipDir
		case d.IsDir():
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
