package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
)

// Ports for child processes come from below the kernel's ephemeral range and
// are handed out once per test binary. A port taken with ":0" and closed
// again can be the kernel's next answer to another ":0" listener, to an
// outgoing connection, or to this binary's next freeAddr call, and a child
// that binds it later finds it taken (a CI run lost a node that way).
var (
	portsMu     sync.Mutex
	portsGiven  = map[int]bool{}
	lowestPort  = 12000
	ephemeralLo = ephemeralRangeStart()
)

// ephemeralRangeStart is the first port the kernel hands out for ":0".
func ephemeralRangeStart() int {
	const fallback = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallback
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil || lo <= lowestPort+1000 {
		return fallback
	}
	return lo
}

// freeAddr is a loopback address nothing listens on now, that this test
// binary has not handed out before, and that the kernel does not pick for
// ":0" or outgoing connections.
func freeAddr(t *testing.T) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := lowestPort + rand.IntN(ephemeralLo-lowestPort)
		if portsGiven[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		portsGiven[port] = true
		return l.Addr().String()
	}
	t.Fatal("no free loopback port below the ephemeral range")
	return ""
}
