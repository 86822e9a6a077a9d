package main

import (
	"fmt"
	"io"
	"sort"
	"time"

	"orderlog/bench/internal/benchutil"
)

// line is one phase's figures on one line.
func (p phaseResult) line() string {
	return fmt.Sprintf("%.0f msg/s, %.0f grants/s, %.1f msg/grant; sequencer %.2f cores (%.2f idle), %.2f µs CPU/grant (%.2f above idle), %.0f ns CPU/msg; commit log %.0f KB/s (%.2f B/msg); etcd %.1f writes/s, %.1f reads/s; commit map %.0f KB/s, %.0f records/s, %.0f frames/s to one follower (%.0f to all); load ack p50 %.2f ms p99 %.2f ms; C lag p50 %s p99 %s (%s); ingest WAL %.0f B/msg; machine %.0f%% busy",
		p.msgsPerSec, p.grantsPerSec, p.msgsPerGrant, p.sequencerCores, p.idleCores, micros(p.cpuPerGrant), micros(p.marginalPerGrant()), float64(p.cpuPerMsg.Nanoseconds()),
		p.commitBytesPerSec/1e3, p.commitBytesPerMsg, p.etcdWritesPerSec, p.etcdReadsPerSec, p.mapBytesPerSec/1e3, p.mapRecordsPerSec, p.mapFramesPerSec, p.allFramesPerSec,
		millis(p.ackP50), millis(p.ackP99), formatLag(p.lag.p50, p.lag.p50Over), formatLag(p.lag.p99, p.lag.p99Over),
		p.lag.probes(), p.walBytesPerMsg, p.machineBusyPercent)
}

// marginalPerGrant is the sequencer's CPU per grant above what it uses
// idle (heartbeats, ticks, the commit-map stream's keep-alives).
func (p phaseResult) marginalPerGrant() time.Duration {
	if p.grantsPerSec <= 0 {
		return 0
	}
	return time.Duration(max(0, p.sequencerCores-p.idleCores) / p.grantsPerSec * float64(time.Second))
}

// medianOf is the median of field over rs.
func medianOf[T any](rs []T, field func(T) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = field(r)
	}
	return benchutil.Median(xs)
}

func medianDuration[T any](rs []T, field func(T) time.Duration) time.Duration {
	return time.Duration(medianOf(rs, func(r T) float64 { return float64(field(r)) }))
}

// medianPhase takes each figure's median over the rounds on its own.
func medianPhase(rs []phaseResult) phaseResult {
	return phaseResult{n: rs[0].n, readers: rs[0].readers,
		msgsPerSec:         medianOf(rs, func(r phaseResult) float64 { return r.msgsPerSec }),
		grantsPerSec:       medianOf(rs, func(r phaseResult) float64 { return r.grantsPerSec }),
		msgsPerGrant:       medianOf(rs, func(r phaseResult) float64 { return r.msgsPerGrant }),
		sequencerCores:     medianOf(rs, func(r phaseResult) float64 { return r.sequencerCores }),
		cpuPerGrant:        medianDuration(rs, func(r phaseResult) time.Duration { return r.cpuPerGrant }),
		cpuPerMsg:          medianDuration(rs, func(r phaseResult) time.Duration { return r.cpuPerMsg }),
		commitBytesPerSec:  medianOf(rs, func(r phaseResult) float64 { return r.commitBytesPerSec }),
		commitBytesPerMsg:  medianOf(rs, func(r phaseResult) float64 { return r.commitBytesPerMsg }),
		walBytesPerMsg:     medianOf(rs, func(r phaseResult) float64 { return r.walBytesPerMsg }),
		etcdWritesPerSec:   medianOf(rs, func(r phaseResult) float64 { return r.etcdWritesPerSec }),
		etcdReadsPerSec:    medianOf(rs, func(r phaseResult) float64 { return r.etcdReadsPerSec }),
		mapBytesPerSec:     medianOf(rs, func(r phaseResult) float64 { return r.mapBytesPerSec }),
		mapRecordsPerSec:   medianOf(rs, func(r phaseResult) float64 { return r.mapRecordsPerSec }),
		mapFramesPerSec:    medianOf(rs, func(r phaseResult) float64 { return r.mapFramesPerSec }),
		allFramesPerSec:    medianOf(rs, func(r phaseResult) float64 { return r.allFramesPerSec }),
		ackP50:             medianDuration(rs, func(r phaseResult) time.Duration { return r.ackP50 }),
		ackP99:             medianDuration(rs, func(r phaseResult) time.Duration { return r.ackP99 }),
		lag:                medianLag(rs),
		machineBusyPercent: medianOf(rs, func(r phaseResult) float64 { return r.machineBusyPercent }),
		idleCores:          medianOf(rs, func(r phaseResult) float64 { return r.idleCores }),
	}
}

func medianDev(rs []devResult) devResult {
	return devResult{
		msgsPerSec:     medianOf(rs, func(r devResult) float64 { return r.msgsPerSec }),
		grantsPerSec:   medianOf(rs, func(r devResult) float64 { return r.grantsPerSec }),
		msgsPerGrant:   medianOf(rs, func(r devResult) float64 { return r.msgsPerGrant }),
		walBytesPerMsg: medianOf(rs, func(r devResult) float64 { return r.walBytesPerMsg }),
	}
}

func medianSaturate(rs []saturateResult) saturateResult {
	return saturateResult{asked: rs[0].asked,
		grantsPerSec:   medianOf(rs, func(r saturateResult) float64 { return r.grantsPerSec }),
		sequencerCores: medianOf(rs, func(r saturateResult) float64 { return r.sequencerCores }),
		cpuPerGrant:    medianDuration(rs, func(r saturateResult) time.Duration { return r.cpuPerGrant }),
		commitBytes:    medianOf(rs, func(r saturateResult) float64 { return r.commitBytes }),
	}
}

// printSummary prints the table of medians and the closing figures.
func printSummary(out io.Writer, cfg config, s summary) {
	fmt.Fprintf(out, "\nmedians of %d rounds (each figure on its own)\n", cfg.rounds)
	fmt.Fprintf(out, "%3s %7s %9s %9s %9s %9s %9s %12s %12s %10s %11s %12s %9s %9s %8s %10s %10s %10s %8s %6s\n",
		"N", "readers", "msg/s", "grants/s", "msg/grant", "seq_cores", "seq_idle", "seq_us/grant", "marginal_us", "seq_ns/msg", "commit_KB/s", "commit_B/msg",
		"etcd_wr/s", "etcd_rd/s", "map_KB/s", "ack_p99", "C_lag_p50", "C_lag_p99", "unpassed", "busy%")
	for _, p := range s.phases {
		fmt.Fprintf(out, "%3d %7d %9.0f %9.0f %9.1f %9.2f %9.2f %12.2f %12.2f %10.0f %11.1f %12.3f %9.1f %9.1f %8.0f %8.2fms %10s %10s %8d %6.0f\n",
			p.n, p.readers, p.msgsPerSec, p.grantsPerSec, p.msgsPerGrant, p.sequencerCores, p.idleCores, micros(p.cpuPerGrant), micros(p.marginalPerGrant()), float64(p.cpuPerMsg.Nanoseconds()),
			p.commitBytesPerSec/1e3, p.commitBytesPerMsg, p.etcdWritesPerSec, p.etcdReadsPerSec, p.mapBytesPerSec/1e3,
			millis(p.ackP99), formatLag(p.lag.p50, p.lag.p50Over), formatLag(p.lag.p99, p.lag.p99Over), p.lag.unpassed, p.machineBusyPercent)
	}
	fmt.Fprintf(out, "C lag: a probe's ack to the commit map's C passing it, C waited for up to %v after the load; unpassed: probes it had not passed by then (median over rounds), a '>' percentile falls among them\n", cfg.lagWait)
	if len(s.fanouts) > 0 {
		f := medianFanout(s.fanouts)
		fmt.Fprintf(out, "commit_map_fanout: N=%d with %d readers against %d, median of %d rounds' pairs: sequencer %+.3f cores for %.0f more frames/s to readers, %.2f µs CPU per frame (one frame per commit entry per reader; %.1f KB/s per reader)\n",
			f.n, f.readers, f.baseReaders, len(s.fanouts), f.cores, f.extraFramesPerSec, micros(f.perFrame), f.mapBytesPerSec/1e3)
	}
	fmt.Fprintf(out, "dev_msgs_per_s=%.0f (orderlog dev at its peak, %s)\n", s.dev.msgsPerSec, devPlace(cfg))
	fmt.Fprintf(out, "dev_grants_per_s=%.0f (%.1f msg/grant)\n", s.dev.grantsPerSec, s.dev.msgsPerGrant)
	fmt.Fprintf(out, "dev_wal_bytes_per_msg=%.0f (journal bytes written per %d B message, one copy)\n", s.dev.walBytesPerMsg, cfg.size)
	for _, c := range s.curve {
		fmt.Fprintf(out, "sequencer_cost %s: %.0f grants/s, %.3f cores, %.2f µs CPU/grant, %.1f commit-log B/grant (framing included)\n",
			c.label(), c.grantsPerSec, c.sequencerCores, micros(c.cpuPerGrant), c.commitBytes)
	}
	fmt.Fprintf(out, "sequencer_capacity_grants_per_s=%.0f (saturated by %d synthetic sessions x %d in flight; the sequencer used %.2f cores)\n",
		s.capacity.grantsPerSec, cfg.saturate.streams, cfg.saturate.window, s.capacity.sequencerCores)
	fmt.Fprintf(out, "sequencer_cpu_us_per_grant_saturated=%.2f (one core orders %.0f grants/s; %.1f commit-log B/grant, framing included)\n",
		micros(s.capacity.cpuPerGrant), 1e6/max(micros(s.capacity.cpuPerGrant), 1e-9), s.capacity.commitBytes)
	fmt.Fprintf(out, "sequencer_headroom_vs_busiest_node_ratio=%.1f (the same over the most grants/s one tmpfs ingest process needed above)\n",
		s.capacity.grantsPerSec/max(busiestNode(s.phases), 1e-9))
	fmt.Fprintf(out, "sequencer_headroom_ratio=%.1f (saturated grants/s over what orderlog dev needs at its peak)\n", s.headroom)
}

// busiestNode is the most grants/s one ingest process asked for in any
// phase (a phase's grants spread evenly over its processes).
func busiestNode(phases []phaseResult) float64 {
	var most float64
	for _, p := range phases {
		most = max(most, p.grantsPerSec/float64(p.n))
	}
	return most
}

// label says how the synthetic grants were paced.
func (r saturateResult) label() string {
	if r.asked == 0 {
		return "saturated"
	}
	return fmt.Sprintf("paced at %.0f grants/s", r.asked)
}

// fanoutCost compares, within one round, the phase with many commit-map
// readers with the phase of the same N with one: the sequencer's extra
// CPU over the extra frames it sent (every reader gets a frame per
// commit entry).
type fanoutCost struct {
	n, readers, baseReaders int
	cores                   float64 // the sequencer's extra CPU
	extraFramesPerSec       float64 // frames to all readers, wide minus base
	perFrame                time.Duration
	mapBytesPerSec          float64 // to one reader, in the wide phase
}

// roundFanout pairs this round's phases (results[i] ran plans[i]).
func roundFanout(plans []phasePlan, results []phaseResult) (fanoutCost, bool) {
	for i, wide := range results {
		for j, base := range results {
			if plans[i].n != plans[j].n || plans[j].readers != 0 || plans[i].readers == 0 {
				continue
			}
			f := fanoutCost{n: wide.n, readers: wide.readers, baseReaders: base.readers,
				cores:             wide.sequencerCores - base.sequencerCores,
				extraFramesPerSec: wide.allFramesPerSec - base.allFramesPerSec,
				mapBytesPerSec:    wide.mapBytesPerSec}
			if f.extraFramesPerSec > 0 {
				f.perFrame = time.Duration(f.cores / f.extraFramesPerSec * float64(time.Second))
			}
			return f, true
		}
	}
	return fanoutCost{}, false
}

func (f fanoutCost) line() string {
	return fmt.Sprintf("sequencer %+.3f cores for %.0f more frames/s to readers: %.2f µs CPU per frame", f.cores, f.extraFramesPerSec, micros(f.perFrame))
}

func medianFanout(fs []fanoutCost) fanoutCost {
	return fanoutCost{n: fs[0].n, readers: fs[0].readers, baseReaders: fs[0].baseReaders,
		cores:             medianOf(fs, func(f fanoutCost) float64 { return f.cores }),
		extraFramesPerSec: medianOf(fs, func(f fanoutCost) float64 { return f.extraFramesPerSec }),
		perFrame:          medianDuration(fs, func(f fanoutCost) time.Duration { return f.perFrame }),
		mapBytesPerSec:    medianOf(fs, func(f fanoutCost) float64 { return f.mapBytesPerSec }),
	}
}

// medianLag takes the median round's p50 and p99 each (a lower bound
// stays marked), and the median counts.
func medianLag(rs []phaseResult) lagStats {
	pick := func(value func(lagStats) (time.Duration, bool)) (time.Duration, bool) {
		type v struct {
			d    time.Duration
			over bool
		}
		vs := make([]v, len(rs))
		for i, r := range rs {
			vs[i].d, vs[i].over = value(r.lag)
		}
		sort.Slice(vs, func(i, j int) bool { return vs[i].d < vs[j].d || vs[i].d == vs[j].d && !vs[i].over && vs[j].over })
		m := vs[len(vs)/2] // as benchutil.Median
		return m.d, m.over
	}
	s := lagStats{
		passed:   int(medianOf(rs, func(r phaseResult) float64 { return float64(r.lag.passed) })),
		unpassed: int(medianOf(rs, func(r phaseResult) float64 { return float64(r.lag.unpassed) })),
		bound:    medianDuration(rs, func(r phaseResult) time.Duration { return r.lag.bound }),
	}
	s.p50, s.p50Over = pick(func(l lagStats) (time.Duration, bool) { return l.p50, l.p50Over })
	s.p99, s.p99Over = pick(func(l lagStats) (time.Duration, bool) { return l.p99, l.p99Over })
	return s
}
