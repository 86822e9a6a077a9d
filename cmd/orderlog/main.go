// Command orderlog is the single orderlog binary: `orderlog dev` runs every
// role in one process; role commands run one role each; client verbs talk to
// a running server. Run `orderlog help` for the list.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
)

// command is one subcommand of the binary.
type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{
	"dev":       {"run everything in one process (embedded etcd, data in ./data)", runDev},
	"node":      {"every role in one process, with an embedded etcd member: deploy three", runNode},
	"cluster":   {"start N node processes on this machine (a local HA cluster)", runCluster},
	"produce":   {"send lines from stdin or files as messages (idempotent session)", runProduce},
	"read":      {"print a range of messages in global order", runRead},
	"consume":   {"join a consumer group and print its messages; --describe shows lag", runConsume},
	"topics":    {"create a topic with N partitions; list topics and partitions", runTopics},
	"schema":    {"the schema registry: register, ls, show, check; a subject's config", runSchema},
	"auth":      {"tokens, per-topic ACLs and quotas: who may do what", runAuth},
	"tail":      {"follow the log and print messages as they are committed", runTail},
	"status":    {"print the sequencer epoch, the committed watermark and store sizes", runStatus},
	"bench":     {"streaming load generator: msg/s, MB/s, ack latency percentiles", runBench},
	"sequencer": {"cluster role: campaign for sequencer leadership (needs --etcd)", runSequencer},
	"ingest":    {"cluster role: a WAL store and an ingest node with the APIs (needs --etcd)", runIngest},
	"reader":    {"cluster role: serve reads from the commit map (needs --etcd)", runReader},
	"archive":   {"inspect the Parquet archive: status, ls, verify (needs --archive)", runArchive},
}

// defaultGCPercent trades memory for latency: the write path allocates per
// message, and at the default of 100 the collector's assists put tens of
// milliseconds on the p99 ack latency (measured: 108 ms → 23 ms at half of
// the peak rate). The GOGC environment variable still overrides it.
const defaultGCPercent = 400

// minProcs is the fewest Ps the runtime gets. With one P per core on a
// two-core machine, a goroutine woken by a finished fdatasync or a network
// read waits in Go's run queue until a running goroutine blocks (or for the
// 10 ms preemption), and the collector's mark worker holds one of the two
// Ps for its whole phase. With more Ps than cores the kernel's preemptive
// scheduler interleaves them instead. Too many cost CPU in idle Ms spinning
// for work and waking each other. Measured at half of the peak rate on two
// cores, in alternating pairs: p99 ack 9.7–14.4 ms with 2 Ps and 6.8–8.5 ms
// with 4 (an earlier build); then 3 Ps beat 4 in 3 of 3 pairs (7.3–9.8 ms
// against 9.7–16.8, server CPU 3–6 % lower) and beat 2 in 3 of 3 (5.0–14.4
// against 9.2–17.0); peak rate the same. The GOMAXPROCS environment
// variable still overrides it.
const minProcs = 3

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) < minProcs {
		runtime.GOMAXPROCS(minProcs)
	}
	if len(os.Args) < 2 || isHelp(os.Args[1]) {
		usage(os.Stdout)
		return
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "orderlog: unknown command %q\n\n", os.Args[1])
		usage(os.Stderr)
		os.Exit(2)
	}
	if err := cmd.run(os.Args[2:]); errors.Is(err, flag.ErrHelp) {
		return // the flag set printed its usage
	} else if err != nil {
		fmt.Fprintf(os.Stderr, "orderlog %s: %v\n", os.Args[1], err)
		code := 1
		if exit, ok := errors.AsType[exitError](err); ok {
			code = exit.code
		}
		os.Exit(code)
	}
}

// exitError ends the command with its own exit status, for an answer a
// script must tell from a failure (schema check's "incompatible").
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

func isHelp(arg string) bool {
	return arg == "help" || arg == "-h" || arg == "--help"
}

func usage(w *os.File) {
	fmt.Fprintln(w, "orderlog — a durable message log with one global total order")
	fmt.Fprintln(w, "\nUsage: orderlog <command> [flags]   (orderlog <command> --help for its flags)")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-10s %s\n", name, commands[name].summary)
	}
}
