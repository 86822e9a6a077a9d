package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

// Ports this benchmark binds are taken from [portLow, portHigh): the
// machine is shared, and other users keep to other ranges. The kernel's
// port 0 picks from the ephemeral range, which reaches above it.
const (
	portLow  = 20000
	portHigh = 45000
)

var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freeAddr returns a loopback address whose port is in the range, free
// when asked and not handed out before in this run (a process given it
// may not have bound it yet).
func freeAddr() (string, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 1000 {
		port := portLow + rand.IntN(portHigh-portLow)
		if handedOut.ports[port] {
			continue
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		handedOut.ports[port] = true
		return addr, nil
	}
	return "", fmt.Errorf("no free port in [%d, %d) after 1000 tries", portLow, portHigh)
}
