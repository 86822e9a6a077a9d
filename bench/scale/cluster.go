package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/etcdserver"
)

// cluster is one sequencer leader and its ingest processes, as separate
// `orderlog` processes on loopback, over an etcd server embedded in this
// benchmark's process (so its counters can be read in process). The
// sequencer campaigns once a store is registered and puts its commit
// ledger (W = 1) on one of the ingest processes' stores.
type cluster struct {
	dir       string
	etcd      *etcdserver.Server
	cli       *clientv3.Client
	sequencer *proc
	ingests   []*proc
}

// clusterConfig is how the processes of a cluster are started.
type clusterConfig struct {
	binary        string
	root          string   // on tmpfs: each cluster's stores, etcd's data and logs go in a directory under it
	sequencerArgs []string // more flags for `orderlog sequencer`
	ingestArgs    []string // more flags for every `orderlog ingest`
}

// startCluster starts etcd, the sequencer and n ingest processes (W = A =
// 1, each with its own store), and returns once every one is ready. If a
// port was taken between freeAddr and the bind, it starts them all once
// more on other ports.
func startCluster(ctx context.Context, cfg clusterConfig, n int) (*cluster, error) {
	c, err := startClusterOnce(ctx, cfg, n)
	if addressInUse(err) && ctx.Err() == nil {
		c, err = startClusterOnce(ctx, cfg, n)
	}
	return c, err
}

func startClusterOnce(ctx context.Context, cfg clusterConfig, n int) (c *cluster, err error) {
	dir, err := os.MkdirTemp(cfg.root, "cluster-")
	if err != nil {
		return nil, err
	}
	c = &cluster{dir: dir}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	etcdClient, err := freeAddr()
	if err != nil {
		return c, err
	}
	etcdPeer, err := freeAddr()
	if err != nil {
		return c, err
	}
	if c.etcd, err = etcdserver.Start(etcdserver.Config{Dir: filepath.Join(c.dir, "etcd"), ClientAddr: etcdClient, PeerAddr: etcdPeer}); err != nil {
		return c, err
	}
	if c.cli, err = c.etcd.NewClient(); err != nil {
		return c, err
	}
	etcdURL := c.etcd.Endpoint()
	grpcAddr, httpAddr, err := addrs()
	if err != nil {
		return c, err
	}
	args := append([]string{"sequencer", "--etcd", etcdURL, "--name", "seq", "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--commit-w", "1", "--commit-a", "1", "--tolerate", "0"}, cfg.sequencerArgs...)
	if c.sequencer, err = startProc(cfg.binary, c.dir, "sequencer", grpcAddr, httpAddr, args...); err != nil {
		return c, err
	}
	for i := range n {
		p, err := startIngest(cfg.binary, c.dir, cfg.ingestArgs, etcdURL, fmt.Sprintf("ingest%d", i+1))
		if err != nil {
			return c, err
		}
		c.ingests = append(c.ingests, p)
	}
	ready, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, p := range append([]*proc{c.sequencer}, c.ingests...) {
		if err := p.waitReady(ready); err != nil {
			return c, err
		}
	}
	return c, nil
}

// startIngest starts an `orderlog ingest` process (a WAL store and an
// ingest node) with its store in its own directory under dir.
func startIngest(binary, dir string, ingestArgs []string, etcdURL, name string) (*proc, error) {
	grpcAddr, httpAddr, err := addrs()
	if err != nil {
		return nil, err
	}
	args := append([]string{"ingest", "--etcd", etcdURL, "--name", name, "--data", filepath.Join(dir, name),
		"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--w", "1", "--a", "1", "--tolerate", "0"}, ingestArgs...)
	return startProc(binary, dir, name, grpcAddr, httpAddr, args...)
}

// stop ends every process (ingests first, so their sessions end before
// the sequencer), then etcd, and removes the cluster's directory.
func (c *cluster) stop() {
	for _, p := range c.ingests {
		_ = p.cmd.Process.Signal(os.Interrupt)
	}
	for _, p := range c.ingests {
		p.stop()
	}
	if c.sequencer != nil {
		c.sequencer.stop()
	}
	if c.cli != nil {
		c.cli.Close() // before the server, or its close waits ~7 s
	}
	if c.etcd != nil {
		c.etcd.Close()
	}
	os.RemoveAll(c.dir)
}
