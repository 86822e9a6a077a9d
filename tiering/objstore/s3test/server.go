// Package s3test runs a real S3-compatible server, versitygw, for tests: it
// is for tests only and no production code may import it. Start launches
// `versitygw posix` on a free loopback port with a fresh root directory and
// one empty bucket, and stops it when the test ends.
//
// The versitygw binary comes from `make s3-server-tool`. When it is missing
// a test fails, unless ORDERLOG_ALLOW_NO_S3=1 is set, in which case it is
// skipped.
package s3test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

const (
	startTimeout = 30 * time.Second
	stopTimeout  = 15 * time.Second
	pollInterval = 20 * time.Millisecond
)

// Server is one versitygw process and its data.
type Server struct {
	Endpoint  string // "http://127.0.0.1:PORT"
	Bucket    string // created empty by Start
	AccessKey string
	Secret    string

	t       testing.TB
	binary  string
	address string // "127.0.0.1:PORT", the same across Restart
	root    string // versitygw's posix root: one directory per bucket
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has exited
}

// Start runs versitygw with an empty bucket and stops it at t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	binary := findBinary(t)
	dir := t.TempDir()
	s := &Server{
		Bucket:    "orderlog-test",
		AccessKey: "orderlog-test-access",
		Secret:    "orderlog-test-secret",
		t:         t,
		binary:    binary,
		address:   freeAddress(t),
		root:      filepath.Join(dir, "root"),
		logPath:   filepath.Join(dir, "versitygw.log"),
	}
	s.Endpoint = "http://" + s.address
	if err := os.Mkdir(s.root, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	s.start()
	s.createBucket()
	return s
}

// SetEnv points the standard AWS credential chain of this test at the
// server, and keeps the SDK from probing the EC2 metadata service.
func (s *Server) SetEnv(t testing.TB) {
	t.Setenv("AWS_ACCESS_KEY_ID", s.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s.Secret)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// findBinary looks for versitygw on PATH, then in $(go env GOPATH)/bin.
func findBinary(t testing.TB) string {
	t.Helper()
	if path, err := exec.LookPath("versitygw"); err == nil {
		return path
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		gopath := filepath.SplitList(strings.TrimSpace(string(out)))
		if len(gopath) > 0 {
			path := filepath.Join(gopath[0], "bin", "versitygw")
			if _, err := os.Stat(path); err == nil {
				return path
			}
		}
	}
	const missing = "versitygw is not installed: run `make s3-server-tool`"
	if os.Getenv("ORDERLOG_ALLOW_NO_S3") == "1" {
		t.Skip(missing + " (skipped: ORDERLOG_ALLOW_NO_S3=1)")
	}
	t.Fatal(missing + " (or set ORDERLOG_ALLOW_NO_S3=1 to skip the S3 tests)")
	return ""
}

// freeAddress returns a loopback address whose port was free a moment ago.
func freeAddress(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// start launches versitygw and waits until it answers HTTP.
func (s *Server) start() {
	s.t.Helper()
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	defer logFile.Close()
	s.cmd = exec.Command(s.binary, "--port", s.address, "--access", s.AccessKey,
		"--secret", s.Secret, "--quiet", "posix", s.root)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start versitygw: %v", err)
	}
	s.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) { cmd.Wait(); close(exited) }(s.cmd, s.exited)
	s.waitReady()
}

// waitReady polls until the server answers any HTTP request.
func (s *Server) waitReady() {
	s.t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(startTimeout)
	for ; time.Now().Before(deadline); time.Sleep(pollInterval) {
		select {
		case <-s.exited:
			s.t.Fatalf("versitygw exited at start: %s", s.log())
		default:
		}
		if resp, err := client.Get(s.Endpoint); err == nil {
			resp.Body.Close()
			return
		}
	}
	s.t.Fatalf("versitygw did not answer on %s within %v: %s", s.address, startTimeout, s.log())
}

func (s *Server) log() string {
	data, _ := os.ReadFile(s.logPath)
	return string(data)
}

// createBucket creates s.Bucket through the S3 API, so that versitygw
// records its owner as it does for any bucket.
func (s *Server) createBucket() {
	s.t.Helper()
	client := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.Secret, ""),
	})
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &s.Bucket}); err != nil {
		s.t.Fatalf("create bucket %s: %v", s.Bucket, err)
	}
}

// Root is the server's data directory (versitygw posix: one directory
// per bucket, an object's bytes in a file under its key), for tests that
// look at what the server stored.
func (s *Server) Root() string { return s.root }

// Stop sends SIGTERM and waits for versitygw to exit (SIGKILL after
// stopTimeout). Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
}

// Restart starts a stopped server again on the same address with the same
// data.
func (s *Server) Restart() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatal(errors.New("s3test: Restart of a running server"))
	}
	s.start()
}
