package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"orderlog/client"
	"orderlog/internal/proccpu"
)

// snapshot is every counter a phase reads, at one moment.
type snapshot struct {
	at              time.Time
	sequencerCPU    time.Duration
	grants          float64 // orderlog_ingest_grants_total, summed over the ingest processes
	logged          float64 // orderlog_ingest_logged_messages_total, likewise
	ingestWALBytes  float64 // orderlog_wal_written_bytes_total of the ingest processes' stores
	etcdProposals   float64 // raft proposals committed: etcd's writes
	etcdRanges      float64 // ranges (reads) etcd's store served
	followerBytes   int64
	followerFrames  int64 // one per commit entry, to the follower the C lag is read from
	followerRecords int64
	allFrames       int64 // the frames every follower received, summed
	commitLogBytes  int64 // the commit-map records, encoded as in the commit log
	machineBusy     int64
	machineTotal    int64
}

func takeSnapshot(c *cluster, f *follower, others []*follower) (snapshot, error) {
	s := snapshot{at: time.Now()}
	var err error
	if s.sequencerCPU, err = proccpu.Process(c.sequencer.pid()); err != nil {
		return s, err
	}
	for _, p := range c.ingests {
		m, err := scrape(p.httpAddr)
		if err != nil {
			return s, err
		}
		s.grants += m["orderlog_ingest_grants_total"]
		s.logged += m["orderlog_ingest_logged_messages_total"]
		s.ingestWALBytes += m["orderlog_wal_written_bytes_total"]
	}
	local, err := gatherLocal()
	if err != nil {
		return s, err
	}
	s.etcdProposals, s.etcdRanges = local["etcd_server_proposals_committed_total"], local["etcd_mvcc_range_total"]
	s.followerBytes, s.followerFrames, s.followerRecords, s.commitLogBytes = f.counters()
	s.allFrames = s.followerFrames
	for _, o := range others {
		s.allFrames += o.framesSoFar()
	}
	s.machineBusy, s.machineTotal, err = machineCPU()
	return s, err
}

// phaseResult is what one cluster of n ingest processes measured.
type phaseResult struct {
	n                  int
	msgsPerSec         float64 // acknowledged, summed over the load generators
	grantsPerSec       float64
	msgsPerGrant       float64
	sequencerCores     float64 // CPU seconds the sequencer process used per second
	cpuPerGrant        time.Duration
	cpuPerMsg          time.Duration
	commitBytesPerSec  float64
	commitBytesPerMsg  float64
	walBytesPerMsg     float64 // ingest stores' journal bytes per message (W = 1)
	etcdWritesPerSec   float64
	etcdReadsPerSec    float64
	mapBytesPerSec     float64 // commit-map stream to one follower
	mapRecordsPerSec   float64
	mapFramesPerSec    float64       // commit-map frames (one per commit entry) to that follower
	allFramesPerSec    float64       // the same summed over every follower
	lag                lagStats      // a probe's ack to C passing it
	ackP50, ackP99     time.Duration // the load's frames, sent to acknowledged
	machineBusyPercent float64
	idleCores          float64 // the sequencer's CPU with the cluster idle
	readers            int     // commit-map followers
}

// loadShare is load's share of one of n load generators: streams
// spread, at least minStreams each.
func loadShare(load client.LoadConfig, i, n, minStreams int) client.LoadConfig {
	share := load
	share.Streams = load.Streams / n
	if i < load.Streams%n {
		share.Streams++
	}
	share.Streams = max(share.Streams, minStreams)
	return share
}

// runLoads drives every client with its share of load at once and
// returns the summed acknowledged rate and every frame's ack latency.
func runLoads(ctx context.Context, clients []*client.Client, load client.LoadConfig, minStreams int) (float64, []time.Duration, error) {
	results := make([]client.LoadResult, len(clients))
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = client.RunLoad(ctx, c, loadShare(load, i, len(clients), minStreams))
		}()
	}
	wg.Wait()
	var total float64
	var latencies []time.Duration
	for i := range clients {
		if errs[i] != nil {
			return 0, nil, fmt.Errorf("load on ingest%d: %w", i+1, errs[i])
		}
		total += results[i].MessagesPerSecond()
		latencies = append(latencies, results[i].Latencies...)
	}
	return total, latencies, nil
}

// phaseConfig is what every cluster phase runs.
type phaseConfig struct {
	cluster       clusterConfig
	load          client.LoadConfig // Duration: the measurement
	warmup        time.Duration
	minStreams    int
	probeInterval time.Duration
	// readers is how many commit-map followers beside the one the C lag
	// is read from: each stands for a reader (every node runs one).
	readers int
	idle    time.Duration // how long the sequencer's idle CPU is measured
	// lagWait bounds the wait, once the load ends, for C to pass the
	// last probe acknowledged during it.
	lagWait time.Duration
}

// runPhase starts a cluster of n ingest processes, warms it up, and
// measures it under the load.
func runPhase(ctx context.Context, cfg phaseConfig, n int) (phaseResult, error) {
	c, err := startCluster(ctx, cfg.cluster, n)
	if err != nil {
		return phaseResult{}, err
	}
	defer c.stop()
	var clients []*client.Client
	for _, p := range c.ingests {
		cl, err := client.Dial(p.grpcAddr)
		if err != nil {
			return phaseResult{}, err
		}
		defer cl.Close()
		clients = append(clients, cl)
	}
	f, err := follow(c.sequencer.grpcAddr)
	if err != nil {
		return phaseResult{}, err
	}
	defer f.stop()
	var others []*follower
	for range cfg.readers {
		extra, err := follow(c.sequencer.grpcAddr)
		if err != nil {
			return phaseResult{}, err
		}
		defer extra.stop()
		others = append(others, extra)
	}
	idle, err := idleCores(c.sequencer.pid(), cfg.idle)
	if err != nil {
		return phaseResult{}, err
	}
	warm := cfg.load
	warm.Duration = cfg.warmup
	if _, _, err := runLoads(ctx, clients, warm, cfg.minStreams); err != nil { // ledgers open, reservations made
		return phaseResult{}, err
	}
	r, err := measure(ctx, cfg, n, c, clients, f, others)
	r.idleCores, r.readers = idle, 1+cfg.readers
	return r, err
}

// measure runs the load with the probes beside it and reads every
// counter before and after.
func measure(ctx context.Context, cfg phaseConfig, n int, c *cluster, clients []*client.Client, f *follower, others []*follower) (phaseResult, error) {
	probeCtx, stopProbes := context.WithCancel(ctx)
	var probes []*probe
	for i, cl := range clients {
		p, err := startProbe(probeCtx, cl, fmt.Sprintf("probe-%d", i), cfg.probeInterval)
		if err != nil {
			stopProbes()
			return phaseResult{}, err
		}
		probes = append(probes, p)
	}
	before, err := takeSnapshot(c, f, others)
	if err != nil {
		stopProbes()
		return phaseResult{}, err
	}
	steady := make(chan etcdSample, 1)
	go func() { // etcd's rates once the load's producers are registered
		time.Sleep(min(time.Second, cfg.load.Duration/3))
		steady <- sampleEtcd()
	}()
	rate, acks, err := runLoads(ctx, clients, cfg.load, cfg.minStreams)
	if err != nil {
		stopProbes()
		return phaseResult{}, err
	}
	after, err := takeSnapshot(c, f, others)
	mid := <-steady
	stopProbes()
	for _, p := range probes {
		<-p.done
		if p.err != nil {
			return phaseResult{}, fmt.Errorf("probe: %w", p.err)
		}
	}
	if err != nil {
		return phaseResult{}, err
	}
	r := summarize(n, rate, before, after)
	r.ackP50, r.ackP99 = percentile(acks, 0.5), percentile(acks, 0.99)
	if mid.err == nil {
		secs := after.at.Sub(mid.at).Seconds()
		r.etcdWritesPerSec = (after.etcdProposals - mid.proposals) / secs
		r.etcdReadsPerSec = (after.etcdRanges - mid.ranges) / secs
	}
	// Probes acknowledged near the end need C to pass them: wait for the
	// highest one (C is a prefix: then it passed every one), or the bound.
	waited := time.Now()
	if highest, ok := highestAcked(probes, after.at); ok {
		waited = f.waitPassed(ctx, highest, cfg.lagWait)
	}
	r.lag = commitLags(f, probes, before.at, after.at, waited)
	return r, ctx.Err()
}

// summarize turns two snapshots into rates and costs.
func summarize(n int, rate float64, before, after snapshot) phaseResult {
	secs := after.at.Sub(before.at).Seconds()
	grants := after.grants - before.grants
	logged := after.logged - before.logged
	cpu := after.sequencerCPU - before.sequencerCPU
	commitBytes := float64(after.commitLogBytes - before.commitLogBytes)
	r := phaseResult{n: n, msgsPerSec: rate, grantsPerSec: grants / secs,
		sequencerCores:    cpu.Seconds() / secs,
		commitBytesPerSec: commitBytes / secs,
		etcdWritesPerSec:  (after.etcdProposals - before.etcdProposals) / secs,
		etcdReadsPerSec:   (after.etcdRanges - before.etcdRanges) / secs,
		mapBytesPerSec:    float64(after.followerBytes-before.followerBytes) / secs,
		mapRecordsPerSec:  float64(after.followerRecords-before.followerRecords) / secs,
		mapFramesPerSec:   float64(after.followerFrames-before.followerFrames) / secs,
		allFramesPerSec:   float64(after.allFrames-before.allFrames) / secs,
	}
	if grants > 0 {
		r.msgsPerGrant = logged / grants
		r.cpuPerGrant = time.Duration(float64(cpu) / grants)
	}
	if logged > 0 {
		r.cpuPerMsg = time.Duration(float64(cpu) / logged)
		r.commitBytesPerMsg = commitBytes / logged
		r.walBytesPerMsg = (after.ingestWALBytes - before.ingestWALBytes) / logged
	}
	if total := after.machineTotal - before.machineTotal; total > 0 {
		r.machineBusyPercent = 100 * float64(after.machineBusy-before.machineBusy) / float64(total)
	}
	return r
}

// etcdSample is etcd's counters at one moment.
type etcdSample struct {
	at                time.Time
	proposals, ranges float64
	err               error
}

func sampleEtcd() etcdSample {
	local, err := gatherLocal()
	return etcdSample{time.Now(), local["etcd_server_proposals_committed_total"], local["etcd_mvcc_range_total"], err}
}

// idleCores is the CPU a process uses per second over d.
func idleCores(pid int, d time.Duration) (float64, error) {
	before, err := proccpu.Process(pid)
	if err != nil {
		return 0, err
	}
	time.Sleep(d)
	after, err := proccpu.Process(pid)
	return (after - before).Seconds() / d.Seconds(), err
}
