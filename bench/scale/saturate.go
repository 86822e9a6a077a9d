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

// saturateResult is the sequencer process's capacity.
type saturateResult struct {
	grantsPerSec   float64
	sequencerCores float64
	cpuPerGrant    time.Duration
	commitBytes    float64 // commit-log bytes per grant
}

// runSaturate starts a cluster with one ingest process that takes no
// producers (its store holds the commit ledger, and its written bytes are
// the commit log's, framing included) and drives its
// sequencer with synthetic grant sessions through the same client an
// ingest node uses (sequencer.GrantClient: requests and Written reports
// coalesce into frames while one is being sent). Every grant is reported
// Written at once, so the commit log and C advance as under real load.
func runSaturate(ctx context.Context, ccfg clusterConfig, cfg saturateConfig) (saturateResult, error) {
	c, err := startCluster(ctx, ccfg, 1)
	if err != nil {
		return saturateResult{}, err
	}
	defer c.stop()
	conn, err := grpc.NewClient(c.sequencer.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return saturateResult{}, err
	}
	defer conn.Close()
	stores, err := ledger.LiveStores(ctx, c.cli)
	if err != nil {
		return saturateResult{}, err
	}
	dialer := ledger.NewGRPCDialer()
	defer dialer.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sessions := make([]*session, cfg.streams)
	for i := range sessions {
		if sessions[i], err = openSession(sctx, c.cli, conn, dialer, stores[:1], fmt.Sprintf("synthetic-%d", i)); err != nil {
			return saturateResult{}, err
		}
	}
	beforeCPU, err := processCPU(c.sequencer.pid())
	if err != nil {
		return saturateResult{}, err
	}
	beforeBytes, err := scrape(c.ingests[0].httpAddr)
	if err != nil {
		return saturateResult{}, err
	}
	var granted atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, len(sessions))
	t0 := time.Now()
	deadline := t0.Add(cfg.duration)
	for i, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.run(cfg, deadline, &granted)
		}()
	}
	wg.Wait()
	secs := time.Since(t0).Seconds()
	afterCPU, err := processCPU(c.sequencer.pid())
	if err != nil {
		return saturateResult{}, err
	}
	afterBytes, err := scrape(c.ingests[0].httpAddr)
	if err != nil {
		return saturateResult{}, err
	}
	if err := errors.Join(errs...); err != nil {
		return saturateResult{}, err
	}
	grants := float64(granted.Load())
	cpu := afterCPU - beforeCPU
	r := saturateResult{grantsPerSec: grants / secs, sequencerCores: cpu.Seconds() / secs}
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

// run keeps cfg.window grant requests in flight until the deadline,
// reporting each grant Written (entry ids counting up) as it arrives.
func (s *session) run(cfg saturateConfig, deadline time.Time, granted *atomic.Int64) error {
	defer s.grants.Close()
	var request uint64
	ask := func() {
		request++
		s.grants.Grant(request, s.ledger, cfg.count)
	}
	for range cfg.window {
		ask()
	}
	var entry int64
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	for {
		select {
		case <-timeout.C:
			return nil
		case frame, ok := <-s.grants.Frames():
			if !ok {
				return fmt.Errorf("grant stream ended: %w", s.grants.Err())
			}
			for _, g := range frame.Grants {
				if g.Status != pb.GrantStatus_GRANTED {
					return fmt.Errorf("grant %d refused: %v", g.RequestId, g.Status)
				}
				granted.Add(1)
				s.grants.Written(s.ledger, entry, sequencer.Range{First: g.Range.First, End: g.Range.End})
				entry++
				ask()
			}
		}
	}
}
