package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill the child when this process dies
// (even by SIGKILL, when no deferred stop runs), so an interrupted
// benchmark leaves no orderlog process behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
