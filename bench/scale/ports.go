package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
)

// Ports this benchmark hands its processes come from [lowestPort,
// ephemeralStart): below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range), as cmd/orderlog's tests and
// internal/chaos do. A port in the ephemeral range can be the kernel's
// next answer to a ":0" listener or an outgoing connection (etcd's and
// gRPC's clients make many), and a child that binds it a moment later
// finds it taken. Below the range only other processes picking ports the
// same way can race us; startCluster retries once if they do.
const lowestPort = 12000

var ephemeralStart = ephemeralRangeStart()

// ephemeralRangeStart is the first port the kernel hands out for ":0"
// (Linux's default when the range cannot be read, as on macOS).
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

var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freeAddr returns a loopback address whose port is below the ephemeral
// range, free when asked and not handed out before in this run (a
// process given it may not have bound it yet).
func freeAddr() (string, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 1000 {
		port := lowestPort + rand.IntN(ephemeralStart-lowestPort)
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
	return "", fmt.Errorf("no free port in [%d, %d) after 1000 tries", lowestPort, ephemeralStart)
}

// addressInUse says whether err is (or quotes a child's log saying) that
// a port was taken between freeAddr and the bind.
func addressInUse(err error) bool {
	return err != nil && strings.Contains(err.Error(), "address already in use")
}
