package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/internal/etcdserver"
	"orderlog/proto/orderlogpb"
)

// TestRolesAsACluster runs the role processes of a small cluster in one
// test: one etcd, three ingest nodes (each with its WAL store; ledgers
// W=3/A=2), one sequencer and one reader, all on loopback. Producers write
// through two ingest nodes; the reader node and an ingest node's reader
// serve the same sequence.
func TestRolesAsACluster(t *testing.T) {
	etcd, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	start := func(roles Roles) *Server { return startClusterNode(t, etcd, roles, ingest.AckQuorum) }
	var ingests []*Server
	for i := 0; i < 3; i++ {
		s := start(Roles{Ingest: true})
		defer s.Close()
		ingests = append(ingests, s)
	}
	seq := start(Roles{Sequencer: true})
	defer seq.Close()
	rd := start(Roles{Reader: true})
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitAllReady(t, ctx, append(ingests, rd)...)

	var last uint64
	for i, s := range ingests[:2] {
		c := dial(t, s)
		p, err := c.NewProducer(ctx, fmt.Sprintf("app-%d", i), client.ProducerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 10; j++ {
			acks, err := p.Produce(ctx, msg("t", "", fmt.Sprintf("%d-%d", i, j)))
			if err != nil {
				t.Fatal(err)
			}
			last = max(last, acks[0].Offset)
		}
		p.Close()
	}
	readerClient, ingestClient := dial(t, rd), dial(t, ingests[2])
	waitCommitted(t, readerClient, last+1)
	waitCommitted(t, ingestClient, last+1)
	fromReader, _ := readAll(t, readerClient)
	fromIngest, _ := readAll(t, ingestClient)
	if len(fromReader) != 20 || fmt.Sprint(values(fromReader)) != fmt.Sprint(values(fromIngest)) {
		t.Fatalf("reader node saw %v, ingest node %v", values(fromReader), values(fromIngest))
	}
	if st, err := dial(t, seq).Status(ctx); err != nil || st.Committed < last+1 {
		t.Fatalf("sequencer status %+v %v", st, err)
	}
}

// startClusterNode starts a role process on etcd with ledgers and the commit
// ledger replicated W=3/A=2, on loopback ports.
func startClusterNode(t *testing.T, etcd *etcdserver.Server, roles Roles, mode ingest.AckMode) *Server {
	t.Helper()
	return startNodeOn(t, etcd, roles, ingest.Config{W: 3, A: 2, Tolerate: 1, AckMode: mode}, Replication{W: 3, A: 2, Tolerate: 1})
}

// startNodeOn starts a node with the given roles and replication on a
// shared etcd.
func startNodeOn(t *testing.T, etcd *etcdserver.Server, roles Roles, in ingest.Config, commit Replication) *Server {
	t.Helper()
	return startTestNode(t, etcd, Config{Roles: roles, Ingest: in, Commit: commit})
}

// startTestNode starts a node on a shared etcd with cfg, filling in a
// unique name, the test logger, free HTTP port and, unless set, a fresh
// data directory and a free gRPC port.
func startTestNode(t *testing.T, etcd *etcdserver.Server, cfg Config) *Server {
	t.Helper()
	cfg.EtcdEndpoints = []string{etcd.Endpoint()}
	cfg.NodeName = fmt.Sprintf("n%d", time.Now().UnixNano())
	cfg.HTTPAddr, cfg.Logger = "127.0.0.1:0", testLogger(t)
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.GRPCAddr == "" {
		cfg.GRPCAddr = "127.0.0.1:0"
	}
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitAllReady(t *testing.T, ctx context.Context, servers ...*Server) {
	t.Helper()
	for _, s := range servers {
		if err := s.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func values(msgs []*orderlogpb.StoredMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = fmt.Sprintf("%d:%s", m.Offset, m.Message.Value)
	}
	return out
}

// TestAckModeLeaderAcksOnTheLocalFsync runs ledgers W=3/A=2 and an ingest
// node in ack mode leader. With the two other stores stopped, a message is
// still acknowledged (its node's own store fsynced it) while the committed
// watermark stays below it: the quorum has not confirmed it.
func TestAckModeLeaderAcksOnTheLocalFsync(t *testing.T) {
	etcd, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	start := func(roles Roles, mode ingest.AckMode) *Server { return startClusterNode(t, etcd, roles, mode) }
	leader := start(Roles{Ingest: true}, ingest.AckLeader)
	defer leader.Close()
	others := []*Server{start(Roles{Ingest: true}, ingest.AckQuorum), start(Roles{Ingest: true}, ingest.AckQuorum)}
	seq := start(Roles{Sequencer: true}, ingest.AckQuorum)
	defer seq.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitAllReady(t, ctx, append(others, leader)...)
	c := dial(t, leader)
	p, err := c.NewProducer(ctx, "app", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	first, err := p.Produce(ctx, msg("t", "", "with all stores"))
	if err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, c, first[0].Offset+1)

	for _, s := range others {
		s.Close()
	}
	ackCtx, cancelAck := context.WithTimeout(ctx, 10*time.Second)
	defer cancelAck()
	second, err := p.Produce(ackCtx, msg("t", "", "with one store"))
	if err != nil {
		t.Fatalf("no ack in ack mode leader with the local store up: %v", err)
	}
	st, err := dial(t, seq).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Committed > second[0].Offset {
		t.Fatalf("C = %d passed offset %d, which only one of three stores holds", st.Committed, second[0].Offset)
	}
}
