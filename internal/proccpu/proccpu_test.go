package proccpu

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// Burning CPU shows in both readings of this process, and they agree to
// within /proc's 10 ms ticks.
func TestProcessAndSelfCountBurnedCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	before, err := Process(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	selfBefore := Self()
	for start := time.Now(); Self()-selfBefore < 200*time.Millisecond; { // CPU time, however loaded the machine
		if time.Since(start) > 20*time.Second {
			t.Fatal("getrusage did not count 200 ms of spinning in 20 s")
		}
	}
	after, err := Process(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	proc, self := after-before, Self()-selfBefore
	if d := proc - self; d > 50*time.Millisecond || d < -50*time.Millisecond {
		t.Fatalf("/proc says %v, getrusage %v", proc, self)
	}
	if _, err := Process(-1); err == nil {
		t.Fatal("no error for a process that cannot exist")
	}
}
