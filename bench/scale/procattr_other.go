//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing here: only Linux has a parent-death signal.
// Children are still stopped by the deferred stops, Ctrl-C included.
func dieWithParent(*exec.Cmd) {}
