package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"orderlog/ingest/ledger"
	"orderlog/internal/keys"
	"orderlog/internal/proccpu"
	pb "orderlog/proto/sequencerpb"
	"orderlog/sequencer"
)

// saturateConfig shapes the synthetic grant load: streams grant sessions
// (each an ingest incarnation with a real open ledger on the commit
// store), window requests in flight on each, count offsets per grant.
type saturateConfig struct {
	streams, window int
	count           uint64
	duration        time.Duration
}

// saturateResult is what the sequencer process did under synthetic grant
// sessions.
type saturateResult struct {
	asked          float64 // grants/s asked; 0: as fast as they came
	grantsPerSec   float64
	sequencerCores float64
	cpuPerGrant    time.Duration
	commitBytes    float64 // commit-log bytes per grant
}

// runSaturate starts a cluster with one ingest process that takes no
// producers (its store holds the commit ledger, and its written bytes are
// the commit log's, framing included) and drives its sequencer with
// synthetic grant sessions through the same client an ingest node uses
// (sequencer.GrantClient: requests and Written reports coalesce into
// frames while one is being sent). Every grant is reported Written at
// once, so the commit log and C advance as under real load. It measures
// once per rate in rates, fresh sessions each time: grants/s asked in all,
// or as fast as the windows allow for 0.
func runSaturate(ctx context.Context, ccfg clusterConfig, cfg saturateConfig, rates []float64) ([]saturateResult, error) {
	c, err := startCluster(ctx, ccfg, 1)
	if err != nil {
		return nil, err
	}
	defer c.stop()
	conn, err := grpc.NewClient(c.sequencer.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stores, err := ledger.LiveStores(ctx, c.cli)
	if err != nil {
		return nil, err
	}
	dialer := ledger.NewGRPCDialer()
	defer dialer.Close()
	var out []saturateResult
	for i, rate := range rates {
		g := grantLoad{c: c, conn: conn, dialer: dialer, ensemble: stores[:1], cfg: cfg, rate: rate, name: fmt.Sprintf("synthetic-%d", i)}
		r, err := g.measure(ctx)
		if err != nil {
			return nil, fmt.Errorf("at %.0f grants/s asked: %w", rate, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// grantLoad is one measurement of synthetic grant sessions.
type grantLoad struct {
	c        *cluster
	conn     *grpc.ClientConn
	dialer   ledger.Dialer
	ensemble []ledger.Member
	cfg      saturateConfig
	rate     float64 // grants/s asked in all; 0: as fast as the windows allow
	name     string  // prefix of the sessions' incarnations
}

func (g grantLoad) measure(ctx context.Context) (saturateResult, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sessions := make([]*session, g.cfg.streams)
	var err error
	for i := range sessions {
		if sessions[i], err = openSession(sctx, g.c.cli, g.conn, g.dialer, g.ensemble, fmt.Sprintf("%s-%d", g.name, i)); err != nil {
			return saturateResult{}, err
		}
	}
	beforeCPU, err := proccpu.Process(g.c.sequencer.pid())
	if err != nil {
		return saturateResult{}, err
	}
	beforeBytes, err := scrape(g.c.ingests[0].httpAddr)
	if err != nil {
		return saturateResult{}, err
	}
	var granted atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, len(sessions))
	t0 := time.Now()
	deadline := t0.Add(g.cfg.duration)
	var interval time.Duration // between one session's requests
	if g.rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(len(sessions)) / g.rate)
	}
	for i, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.run(g.cfg.window, g.cfg.count, interval, deadline, &granted)
		}()
	}
	wg.Wait()
	secs := time.Since(t0).Seconds()
	afterCPU, err := proccpu.Process(g.c.sequencer.pid())
	if err != nil {
		return saturateResult{}, err
	}
	afterBytes, err := scrape(g.c.ingests[0].httpAddr)
	if err != nil {
		return saturateResult{}, err
	}
	if err := errors.Join(errs...); err != nil {
		return saturateResult{}, err
	}
	grants := float64(granted.Load())
	cpu := afterCPU - beforeCPU
	r := saturateResult{asked: g.rate, grantsPerSec: grants / secs, sequencerCores: cpu.Seconds() / secs}
	if grants > 0 {
		r.cpuPerGrant = time.Duration(float64(cpu) / grants)
		r.commitBytes = (afterBytes["orderlog_wal_written_bytes_total"] - beforeBytes["orderlog_wal_written_bytes_total"]) / grants
	}
	return r, nil
}

// session is one synthetic ingest incarnation's grant session.
type session struct {
	grants *sequencer.GrantClient
	ledger uint64
}

// openSession registers an ingest incarnation (its liveness key on a
// lease), creates its ledger in the current epoch, and opens its grant
// stream.
func openSession(ctx context.Context, cli *clientv3.Client, conn *grpc.ClientConn, dialer ledger.Dialer, ensemble []ledger.Member, incarnation string) (*session, error) {
	lease, err := cli.Grant(ctx, 30)
	if err != nil {
		return nil, err
	}
	if _, err := cli.Put(ctx, keys.Ingest(incarnation), "alive", clientv3.WithLease(lease.ID)); err != nil {
		return nil, err
	}
	for {
		resp, err := cli.Get(ctx, keys.SeqEpoch)
		if err != nil {
			return nil, err
		}
		if len(resp.Kvs) == 0 {
			return nil, errors.New("no sequencer epoch in etcd")
		}
		epoch, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
		if err != nil {
			return nil, err
		}
		w, err := ledger.Create(ctx, cli, ledger.CreateOptions{Epoch: epoch, WriterIncarnation: incarnation,
			Ensemble: ensemble, AckQuorum: 1, Stores: dialer})
		if errors.Is(err, ledger.ErrStaleEpoch) {
			continue // a new leader took over meanwhile
		}
		if err != nil {
			return nil, err
		}
		grants, err := sequencer.DialGrant(ctx, pb.NewSequencerClient(conn), incarnation, int64(lease.ID))
		if err != nil {
			return nil, err
		}
		return &session{grants: grants, ledger: w.ID()}, nil
	}
}

// run keeps up to window grant requests in flight until the deadline,
// one every interval (0: a new one for each answered), and reports each
// grant Written (entry ids counting up) as it arrives.
func (s *session) run(window int, count uint64, interval time.Duration, deadline time.Time, granted *atomic.Int64) error {
	defer s.grants.Close()
	var request uint64
	inFlight := 0
	ask := func() {
		request++
		inFlight++
		s.grants.Grant(request, s.ledger, count)
	}
	var tick <-chan time.Time
	start := time.Now()
	if interval > 0 {
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		tick = ticker.C
	} else {
		for range window {
			ask()
		}
	}
	var entry int64
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	for {
		select {
		case <-timeout.C:
			return nil
		case <-tick:
			// Catch up on ticks a busy machine delayed or dropped.
			due := int(time.Since(start)/interval) - int(request)
			for ; due > 0 && inFlight < window; due-- {
				ask()
			}
		case frame, ok := <-s.grants.Frames():
			if !ok {
				return fmt.Errorf("grant stream ended: %w", s.grants.Err())
			}
			for _, g := range frame.Grants {
				if g.Status != pb.GrantStatus_GRANTED {
					return fmt.Errorf("grant %d refused: %v", g.RequestId, g.Status)
				}
				inFlight--
				granted.Add(1)
				s.grants.Written(s.ledger, entry, sequencer.Range{First: g.Range.First, End: g.Range.End})
				entry++
				if interval == 0 {
					ask()
				}
			}
		}
	}
}
