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
	endpoints := []string{etcd.Endpoint()}
	start := func(roles Roles) *Server {
		t.Helper()
		s, err := Start(Config{Roles: roles, EtcdEndpoints: endpoints, DataDir: t.TempDir(), NodeName: fmt.Sprintf("n%d", time.Now().UnixNano()),
			GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logf: t.Logf,
			Ingest: ingest.Config{W: 3, A: 2, Tolerate: 1}, Commit: Replication{W: 3, A: 2, Tolerate: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
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
	for _, s := range append(ingests, rd) {
		if err := s.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}

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

func values(msgs []*orderlogpb.StoredMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = fmt.Sprintf("%d:%s", m.Offset, m.Message.Value)
	}
	return out
}
