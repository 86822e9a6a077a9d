package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"orderlog/client"
)

// TestSIGTERMWhileStartingStopsCleanly: a SIGTERM while `orderlog dev` is
// still starting (signals were caught only once it was ready, so the
// process died without closing) ends it with status 0 and "stopping", and
// the data directory starts again.
func TestSIGTERMWhileStartingStopsCleanly(t *testing.T) {
	srv := newDevProcess(t)
	srv.start()
	time.Sleep(300 * time.Millisecond) // etcd is still starting
	srv.stop()
	if code := srv.cmd.ProcessState.ExitCode(); code != 0 {
		raw, _ := os.ReadFile(srv.log.Name())
		t.Fatalf("exit status %d after a SIGTERM while starting; log:\n%s", code, raw)
	}
	if raw, _ := os.ReadFile(srv.log.Name()); !strings.Contains(string(raw), "stopping") {
		t.Fatalf("no clean stop in the log:\n%s", raw)
	}
	srv.start()
	c, err := client.Dial(srv.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv.waitReady(c)
	srv.stop()
}
