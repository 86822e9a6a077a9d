// Command scale measures how many ingest nodes one sequencer leader
// carries (`make bench-scale`, issue 20). For N = 1, 2, 4, 8 it starts one
// `orderlog sequencer` and N `orderlog ingest` processes on loopback (W = A
// = 1, every store on tmpfs so the shared disk is out of the picture, etcd
// embedded in this process) and drives them with the `orderlog bench` load
// (idempotent gRPC streams of 1 KiB messages, spread over the nodes). For
// each N it prints the acknowledged msg/s, grants/s, messages per grant,
// the sequencer process's CPU per grant and per message (/proc/PID/stat),
// the commit log's bytes/s (the written bytes of the store that holds it),
// etcd's writes and reads per second, and how long after its ack C passes a
// probe message (p50/p99). Then it saturates a sequencer alone with
// synthetic grant sessions for its capacity in grants/s, and measures
// `orderlog dev` at its own peak for the grant rate one node needs. It ends
// with sequencer_headroom_ratio= (capacity over that rate: how many
// single-node peaks one leader orders). Everything shares this machine's
// cores, the load generators included: the rates are this machine's, the
// costs per grant and per message carry over.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"orderlog/client"
)

// config is one run of the benchmark.
type config struct {
	binary        string
	nodes         []int
	rounds        int
	duration      time.Duration
	warmup        time.Duration
	streams       int
	minStreams    int
	size          int
	probeInterval time.Duration
	lagWait       time.Duration // how long C may take, after the load, to pass the last probe
	idle          time.Duration
	fanoutNodes   int // the N measured again with fanoutReaders commit-map readers (0: not)
	fanoutReaders int
	tmpfs         string
	devDir        string
	devArgs       []string
	sequencerArgs []string
	ingestArgs    []string
	saturate      saturateConfig
	curve         []float64 // paced grant rates the sequencer's cost is measured at
}

func main() {
	var cfg config
	var nodes, curve, devArgs, sequencerArgs, ingestArgs string
	flag.StringVar(&cfg.binary, "orderlog", "bin/orderlog", "the orderlog binary")
	flag.StringVar(&nodes, "nodes", "1,2,4,8", "ingest process counts to measure")
	flag.IntVar(&cfg.rounds, "rounds", 3, "rounds of every phase; medians are reported")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Second, "length of each measurement")
	flag.DurationVar(&cfg.warmup, "warmup", time.Second, "load before each measurement (ledgers open, reservations made)")
	flag.IntVar(&cfg.streams, "streams", 16, "producer streams in all, spread over the ingest processes")
	flag.IntVar(&cfg.minStreams, "min-streams", 2, "producer streams per ingest process at least")
	flag.IntVar(&cfg.size, "size", 1024, "message size")
	flag.DurationVar(&cfg.probeInterval, "probe-interval", 20*time.Millisecond, "one probe message per ingest process this often, for the C lag")
	flag.DurationVar(&cfg.lagWait, "lag-wait", 15*time.Second, "after each load, wait at most this long for C to pass the last probe acknowledged (probes it has not passed by then are counted apart)")
	flag.DurationVar(&cfg.idle, "idle", time.Second, "how long the sequencer's idle CPU is measured in each phase")
	flag.IntVar(&cfg.fanoutNodes, "fanout-nodes", 2, "measure this N again with -fanout-readers commit-map readers (0: do not)")
	flag.IntVar(&cfg.fanoutReaders, "fanout-readers", 32, "commit-map readers in the fan-out phase")
	flag.StringVar(&cfg.tmpfs, "tmpfs", "/dev/shm", "tmpfs directory for the clusters' stores and etcd")
	flag.StringVar(&cfg.devDir, "dev-dir", "", "directory for `orderlog dev`'s data (default: the system's temporary directory, on disk as deployed)")
	flag.StringVar(&devArgs, "dev-args", "", "more flags for orderlog dev, space-separated")
	flag.StringVar(&sequencerArgs, "sequencer-args", "", "more flags for orderlog sequencer, space-separated")
	flag.StringVar(&ingestArgs, "ingest-args", "", "more flags for every orderlog ingest, space-separated")
	flag.IntVar(&cfg.saturate.streams, "sat-streams", 32, "synthetic grant sessions when saturating the sequencer")
	flag.IntVar(&cfg.saturate.window, "sat-window", 16, "grant requests in flight per synthetic session")
	flag.Uint64Var(&cfg.saturate.count, "sat-count", 64, "offsets per synthetic grant")
	flag.DurationVar(&cfg.saturate.duration, "sat-duration", 0, "length of each saturation measurement (default: -duration)")
	flag.StringVar(&curve, "curve", "1000,10000,30000", "paced synthetic grant rates (grants/s in all) to measure the sequencer's CPU per grant at, before saturating it")
	flag.Parse()
	debug.SetGCPercent(400) // as the orderlog binary does
	var err error
	if cfg.nodes, err = parseInts(nodes); err != nil {
		fail(err)
	}
	if cfg.curve, err = parseRates(curve); err != nil {
		fail(err)
	}
	cfg.devArgs, cfg.sequencerArgs, cfg.ingestArgs = strings.Fields(devArgs), strings.Fields(sequencerArgs), strings.Fields(ingestArgs)
	if cfg.saturate.duration == 0 {
		cfg.saturate.duration = cfg.duration
	}
	if err := cfg.validate(); err != nil {
		fail(err)
	}
	// On Ctrl-C or SIGTERM the run returns, so the deferred stops end the
	// children and the tmpfs directory is removed; a second signal kills.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()
	_, err = run(ctx, cfg, os.Stdout)
	stop()
	if err != nil {
		fail(err)
	}
}

// validate refuses flags that would measure nothing or drop a figure
// without saying so.
func (cfg config) validate() error {
	switch {
	case cfg.rounds < 1:
		return errors.New("-rounds must be at least 1")
	case cfg.duration <= 0 || cfg.saturate.duration <= 0:
		return errors.New("-duration and -sat-duration must be positive")
	case cfg.lagWait <= 0:
		return errors.New("-lag-wait must be positive")
	case cfg.fanoutNodes < 0:
		return errors.New("-fanout-nodes must be 0 (no fan-out phase) or one of -nodes")
	case cfg.fanoutNodes > 0 && cfg.fanoutReaders <= 1:
		return fmt.Errorf("-fanout-readers %d: the fan-out phase compares more than one reader with one (or -fanout-nodes 0)", cfg.fanoutReaders)
	case cfg.fanoutNodes > 0 && !slices.Contains(cfg.nodes, cfg.fanoutNodes):
		return fmt.Errorf("-fanout-nodes %d is not in -nodes %v: the fan-out is measured against that N's phase with one reader", cfg.fanoutNodes, cfg.nodes)
	}
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench/scale:", err)
	os.Exit(1)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-nodes %q: want positive counts", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Fields(strings.ReplaceAll(s, ",", " ")) {
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("-curve %q: want positive rates", s)
		}
		out = append(out, r)
	}
	return out, nil
}

// summary is what a run found, medians over its rounds.
type summary struct {
	phases   []phaseResult
	dev      devResult
	capacity saturateResult
	curve    []saturateResult // at each paced rate
	fanouts  []fanoutCost     // each round's pair of phases
	headroom float64
}

// run measures every phase in rounds (each round: dev, every N, the
// sequencer alone, so a slow minute of the machine hits one round) and
// prints the medians.
func run(ctx context.Context, cfg config, out io.Writer) (summary, error) {
	root, err := os.MkdirTemp(cfg.tmpfs, "orderlog-scale-")
	if err != nil {
		return summary{}, fmt.Errorf("tmpfs directory: %w", err)
	}
	defer os.RemoveAll(root)
	printHeader(out, cfg, root)
	rs := rounds{plans: planPhases(cfg)}
	rs.phases = make([][]phaseResult, len(rs.plans))
	rs.sats = make([][]saturateResult, len(cfg.curve)+1) // by rate; saturated last
	for r := range cfg.rounds {
		if err := rs.run(ctx, cfg, root, r, out); err != nil {
			return summary{}, fmt.Errorf("round %d: %w", r, err)
		}
	}
	sum := rs.medians()
	printSummary(out, cfg, sum)
	return sum, nil
}

func printHeader(out io.Writer, cfg config, root string) {
	fmt.Fprintf(out, "stores and etcd on tmpfs (%s): the shared disk is out of the picture; `orderlog dev` on %s\n", root, devPlace(cfg))
	replication := "W=A=1"
	if len(cfg.ingestArgs) > 0 {
		replication += " unless -ingest-args says otherwise: " + strings.Join(cfg.ingestArgs, " ")
	}
	fmt.Fprintf(out, "%d cores shared by every process and the load generators; %s; %d rounds of %v after %v of warm-up; %d streams of %d B messages (at least %d per ingest process)\n",
		runtime.NumCPU(), replication, cfg.rounds, cfg.duration, cfg.warmup, cfg.streams, cfg.size, cfg.minStreams)
}

// phasePlan is one cluster phase of a round: n ingest processes, and
// readers commit-map followers beside the one the C lag is read from.
type phasePlan struct{ n, readers int }

func planPhases(cfg config) []phasePlan {
	var plans []phasePlan
	for _, n := range cfg.nodes {
		plans = append(plans, phasePlan{n, 0})
	}
	if cfg.fanoutNodes > 0 {
		plans = append(plans, phasePlan{cfg.fanoutNodes, cfg.fanoutReaders - 1})
	}
	return plans
}

// rounds collects every round's results: phases[i] are plans[i]'s,
// sats[j] the sequencer alone at the j-th paced rate (the last:
// saturated).
type rounds struct {
	plans   []phasePlan
	phases  [][]phaseResult
	devs    []devResult
	sats    [][]saturateResult
	fanouts []fanoutCost
}

func (rs *rounds) run(ctx context.Context, cfg config, root string, r int, out io.Writer) error {
	load := client.LoadConfig{Streams: cfg.streams, Size: cfg.size, Frame: 64, InFlight: 8, Duration: cfg.duration}
	d, err := runDev(ctx, cfg.binary, cfg.devDir, load, cfg.warmup, cfg.devArgs)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	fmt.Fprintf(out, "round %d dev: %.0f msg/s, %.0f grants/s, %.1f msg/grant, %.0f B/msg on disk\n", r, d.msgsPerSec, d.grantsPerSec, d.msgsPerGrant, d.walBytesPerMsg)
	rs.devs = append(rs.devs, d)
	ccfg := clusterConfig{binary: cfg.binary, root: root, sequencerArgs: cfg.sequencerArgs, ingestArgs: cfg.ingestArgs}
	pcfg := phaseConfig{cluster: ccfg, load: load, warmup: cfg.warmup, minStreams: cfg.minStreams, probeInterval: cfg.probeInterval, idle: cfg.idle, lagWait: cfg.lagWait}
	var this []phaseResult
	for i, plan := range rs.plans {
		pcfg.readers = plan.readers
		p, err := runPhase(ctx, pcfg, plan.n)
		if err != nil {
			return fmt.Errorf("N=%d: %w", plan.n, err)
		}
		fmt.Fprintf(out, "round %d N=%d, %d commit-map readers: %s\n", r, plan.n, p.readers, p.line())
		rs.phases[i] = append(rs.phases[i], p)
		this = append(this, p)
	}
	if f, ok := roundFanout(rs.plans, this); ok {
		fmt.Fprintf(out, "round %d commit_map_fanout: N=%d with %d readers against %d: %s\n", r, f.n, f.readers, f.baseReaders, f.line())
		rs.fanouts = append(rs.fanouts, f)
	}
	results, err := runSaturate(ctx, ccfg, cfg.saturate, append(slices.Clone(cfg.curve), 0))
	if err != nil {
		return fmt.Errorf("synthetic grants: %w", err)
	}
	for i, s := range results {
		fmt.Fprintf(out, "round %d sequencer alone, %s: %.0f grants/s, sequencer %.2f cores, %.2f µs CPU/grant, %.1f commit-log B/grant\n",
			r, s.label(), s.grantsPerSec, s.sequencerCores, micros(s.cpuPerGrant), s.commitBytes)
		rs.sats[i] = append(rs.sats[i], s)
	}
	return nil
}

// medians takes each figure's median over the rounds.
func (rs *rounds) medians() summary {
	sum := summary{dev: medianDev(rs.devs), capacity: medianSaturate(rs.sats[len(rs.sats)-1]), fanouts: rs.fanouts}
	for _, s := range rs.sats[:len(rs.sats)-1] {
		sum.curve = append(sum.curve, medianSaturate(s))
	}
	for _, p := range rs.phases {
		sum.phases = append(sum.phases, medianPhase(p))
	}
	if sum.dev.grantsPerSec > 0 {
		sum.headroom = sum.capacity.grantsPerSec / sum.dev.grantsPerSec
	}
	return sum
}

func devPlace(cfg config) string {
	if cfg.devDir == "" {
		return os.TempDir() + " (disk)"
	}
	return cfg.devDir
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
