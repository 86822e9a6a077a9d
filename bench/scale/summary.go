package main

import (
	"fmt"
	"io"
	"time"

	"orderlog/bench/internal/benchutil"
)

// line is one phase's figures on one line.
func (p phaseResult) line() string {
	return fmt.Sprintf("%.0f msg/s, %.0f grants/s, %.1f msg/grant; sequencer %.2f cores (%.2f idle), %.2f µs CPU/grant (%.2f above idle), %.0f ns CPU/msg; commit log %.0f KB/s (%.2f B/msg); etcd %.1f writes/s, %.1f reads/s; commit map %.0f KB/s, %.0f records/s to one follower; load ack p50 %.2f ms p99 %.2f ms; C lag p50 %.2f ms p99 %.2f ms (%d probes); ingest WAL %.0f B/msg; machine %.0f%% busy",
		p.msgsPerSec, p.grantsPerSec, p.msgsPerGrant, p.sequencerCores, p.idleCores, micros(p.cpuPerGrant), micros(p.marginalPerGrant()), float64(p.cpuPerMsg.Nanoseconds()),
		p.commitBytesPerSec/1e3, p.commitBytesPerMsg, p.etcdWritesPerSec, p.etcdReadsPerSec, p.mapBytesPerSec/1e3, p.mapRecordsPerSec,
		millis(p.ackP50), millis(p.ackP99), millis(p.lagP50), millis(p.lagP99), p.lagSamples, p.walBytesPerMsg, p.machineBusyPercent)
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
		ackP50:             medianDuration(rs, func(r phaseResult) time.Duration { return r.ackP50 }),
		ackP99:             medianDuration(rs, func(r phaseResult) time.Duration { return r.ackP99 }),
		lagP50:             medianDuration(rs, func(r phaseResult) time.Duration { return r.lagP50 }),
		lagP99:             medianDuration(rs, func(r phaseResult) time.Duration { return r.lagP99 }),
		lagSamples:         int(medianOf(rs, func(r phaseResult) float64 { return float64(r.lagSamples) })),
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
	fmt.Fprintf(out, "%3s %7s %9s %9s %9s %9s %9s %12s %12s %10s %11s %12s %9s %9s %8s %10s %10s %10s %6s\n",
		"N", "readers", "msg/s", "grants/s", "msg/grant", "seq_cores", "seq_idle", "seq_us/grant", "marginal_us", "seq_ns/msg", "commit_KB/s", "commit_B/msg",
		"etcd_wr/s", "etcd_rd/s", "map_KB/s", "ack_p99", "C_lag_p50", "C_lag_p99", "busy%")
	for _, p := range s.phases {
		fmt.Fprintf(out, "%3d %7d %9.0f %9.0f %9.1f %9.2f %9.2f %12.2f %12.2f %10.0f %11.1f %12.3f %9.1f %9.1f %8.0f %8.2fms %8.2fms %8.2fms %6.0f\n",
			p.n, p.readers, p.msgsPerSec, p.grantsPerSec, p.msgsPerGrant, p.sequencerCores, p.idleCores, micros(p.cpuPerGrant), micros(p.marginalPerGrant()), float64(p.cpuPerMsg.Nanoseconds()),
			p.commitBytesPerSec/1e3, p.commitBytesPerMsg, p.etcdWritesPerSec, p.etcdReadsPerSec, p.mapBytesPerSec/1e3,
			millis(p.ackP99), millis(p.lagP50), millis(p.lagP99), p.machineBusyPercent)
	}
	if f, ok := fanout(s.phases); ok {
		fmt.Fprintf(out, "commit_map_fanout: N=%d with %d readers against %d: sequencer %+.3f cores, %.2f µs CPU per reader per grant (%.1f KB/s per reader)\n",
			f.wide.n, f.wide.readers, f.base.readers, f.cores, f.perReaderPerGrant, f.wide.mapBytesPerSec/1e3)
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

// fanoutCost compares a phase with many commit-map readers with the
// phase of the same N with one.
type fanoutCost struct {
	base, wide        phaseResult
	cores             float64 // the sequencer's extra CPU
	perReaderPerGrant float64 // µs of it per extra reader and grant
}

func fanout(phases []phaseResult) (fanoutCost, bool) {
	for _, wide := range phases {
		for _, base := range phases {
			if base.n != wide.n || base.readers != 1 || wide.readers <= 1 {
				continue
			}
			f := fanoutCost{base: base, wide: wide}
			f.cores = wide.sequencerCores - base.sequencerCores
			if grants := (base.grantsPerSec + wide.grantsPerSec) / 2; grants > 0 {
				f.perReaderPerGrant = f.cores / float64(wide.readers-base.readers) / grants * 1e6
			}
			return f, true
		}
	}
	return fanoutCost{}, false
}
