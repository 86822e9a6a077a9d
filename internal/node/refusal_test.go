package node

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/internal/etcdserver"
	"orderlog/internal/keys"
)

// TestRefusedGrantsBackOff: while no sequencer grants, a waiting message
// makes the ingest node reopen ledgers at a slowing pace (it created
// hundreds a second, each with etcd records and a producer snapshot), and
// once a sequencer is back the message is logged.
func TestRefusedGrantsBackOff(t *testing.T) {
	etcd, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	start := func(roles Roles) *Server {
		return startNodeOn(t, etcd, roles, ingest.Config{W: 1, A: 1}, Replication{W: 1, A: 1})
	}
	in := start(Roles{Ingest: true, Reader: true})
	defer in.Close()
	seq := start(Roles{Sequencer: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitAllReady(t, ctx, in)
	c := dial(t, in)
	p, err := c.NewProducer(ctx, "app", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Produce(ctx, msg("t", "", "before")); err != nil {
		t.Fatal(err)
	}
	cli, err := etcd.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ledgers := func() int64 {
		resp, err := cli.Get(ctx, keys.LedgersPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	seq.Close()
	before := ledgers()
	pending, err := p.Send(ctx, msg("t", "", "during"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if opened := ledgers() - before; opened > 12 {
		t.Fatalf("%d ledgers opened in 3 s without a sequencer", opened)
	}
	seq = start(Roles{Sequencer: true})
	defer seq.Close()
	if _, err := pending.Wait(ctx); err != nil {
		t.Fatalf("message sent while no sequencer granted: %v", err)
	}
}
