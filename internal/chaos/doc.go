// Package chaos is orderlog's fault-injection harness: it runs a cluster of
// real `orderlog node` processes on 127.0.0.1, drives idempotent producers
// (gRPC and HTTP) and tailing readers against it, injects faults — SIGKILL,
// SIGSTOP longer than the leases, partitions through a fault-injecting TCP
// proxy, a wiped WAL directory, a flipped byte in a WAL segment — and
// checks the recorded history twice: with internal/history's checker
// (DESIGN.md §9) and, independently, for linearizability against a
// sequential model of a log (porcupine).
//
// It owns nothing a server uses: it is test support, run by `make chaos`
// (TestChaos). It must never touch anything but loopback addresses, the
// free ports it picks and the directories it creates.
//
// Partitions: every node's etcd peer port sits behind a Proxy, and the
// nodes' --etcd-initial-cluster names the proxies, so all raft traffic
// between members crosses them. A proxy tells which node process dialled
// a connection from the kernel's socket table (/proc, Linux only), so
// cutting node i off both ways means: refuse and close connections into
// i's proxy from other nodes, and connections from i into the others'.
// Connections from processes that are not nodes (the harness's clients)
// are never cut.
package chaos
