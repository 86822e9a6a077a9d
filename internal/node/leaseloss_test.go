package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/internal/etcdserver"
	"orderlog/internal/keys"
)

// Lease loss: sessions, registrations and leadership come back after their
// etcd leases are lost, without a restart. Helpers: etcdoutage_test.go.

// leaseTTL is the shortest lease etcd grants; the tests' outages outlast it.
const leaseTTL = 2 * time.Second

// startLeaseNode starts a node with the given roles on etcd, its leases of
// leaseTTL, W = A = 1, recording its lease losses in losses.
func startLeaseNode(t *testing.T, etcd *etcdserver.Server, roles Roles, losses *leaseLosses) *Server {
	t.Helper()
	s, err := Start(Config{Roles: roles, EtcdEndpoints: []string{etcd.Endpoint()}, DataDir: t.TempDir(),
		NodeName: fmt.Sprintf("n%d", time.Now().UnixNano()), GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Logger: testLogger(t), Events: losses.listener(), Ingest: ingest.Config{LeaseTTL: leaseTTL}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func startEtcd(t *testing.T) (*etcdserver.Server, *clientv3.Client) {
	t.Helper()
	etcd, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := etcd.NewClient()
	if err != nil {
		etcd.Close()
		t.Fatal(err)
	}
	return etcd, cli
}

// storeKey is the etcd key of s's store registration.
func storeKey(s *Server) string { return keys.Store(s.store.StoreID()) }

// registeredIncarnation is the incarnation s's store is registered with
// (0: not registered).
func registeredIncarnation(t *testing.T, cli *clientv3.Client, s *Server) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, storeKey(s))
	if err != nil || len(resp.Kvs) == 0 {
		return 0
	}
	var rec storeRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Incarnation
}

// TestStoreRegistersAgainAfterItsLeaseIsRevoked: a WAL store whose lease is
// revoked registers again under a new lease, with the same incarnation (its
// disk is intact), and reports the loss once.
func TestStoreRegistersAgainAfterItsLeaseIsRevoked(t *testing.T) {
	etcd, cli := startEtcd(t)
	defer etcd.Close()
	defer cli.Close()
	var losses leaseLosses
	s := startLeaseNode(t, etcd, Roles{Ingest: true}, &losses)
	defer s.Close()
	incarnation := s.store.Incarnation()

	old := revokeLeaseOf(t, cli, storeKey(s))
	waitFor(t, 10*time.Second, "the store registered again under a new lease", func() bool {
		lease := leaseOf(t, cli, storeKey(s))
		return lease != 0 && lease != old && s.storeReady() == nil
	})
	if got := registeredIncarnation(t, cli, s); got != incarnation {
		t.Fatalf("registered again as incarnation %d, want %d", got, incarnation)
	}
	if n := losses.count("store " + s.store.StoreID()); n != 1 {
		t.Fatalf("LeaseLost fired %d times for the store, want 1", n)
	}
}

// electionKeyOf returns the sequencer election key s campaigns with and
// its lease ("" if s has none).
func electionKeyOf(t *testing.T, cli *clientv3.Client, s *Server) (string, clientv3.LeaseID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, keys.SeqElection+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if string(kv.Value) == s.GRPCAddr() {
			return string(kv.Key), clientv3.LeaseID(kv.Lease)
		}
	}
	return "", 0
}

// TestSequencerStandbyCampaignsAgainAfterItsSessionIsLost: a standby whose
// election session is lost creates a new session and campaigns again (ready
// once it has), and takes over when the leader stops.
func TestSequencerStandbyCampaignsAgainAfterItsSessionIsLost(t *testing.T) {
	etcd, cli := startEtcd(t)
	defer etcd.Close()
	defer cli.Close()
	var losses leaseLosses
	in := startLeaseNode(t, etcd, Roles{Ingest: true}, &losses) // the commit ledger's store
	defer in.Close()
	leader := startLeaseNode(t, etcd, Roles{Sequencer: true}, &losses)
	defer leader.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitAllReady(t, ctx, leader)
	standby := startLeaseNode(t, etcd, Roles{Sequencer: true}, &losses)
	defer standby.Close()
	waitAllReady(t, ctx, standby)

	// Ready means the standby has a session; its campaign key is written
	// just after, so wait for it.
	var key string
	waitFor(t, 10*time.Second, "the standby's campaign key", func() bool {
		key, _ = electionKeyOf(t, cli, standby)
		return key != ""
	})
	old := revokeLeaseOf(t, cli, key)
	waitFor(t, 10*time.Second, "the standby campaigning again with a new session", func() bool {
		_, lease := electionKeyOf(t, cli, standby)
		return lease != 0 && lease != old && standby.Ready() == nil
	})
	leader.Close()
	waitFor(t, 10*time.Second, "the standby leading once the leader stopped", func() bool {
		return standby.sequencer.Status().Serving
	})
}

// TestSequencerLeaderLeadsAgainAfterItsSessionIsLost: a leader whose
// election session is lost stops leading, and leads again in a new epoch.
func TestSequencerLeaderLeadsAgainAfterItsSessionIsLost(t *testing.T) {
	etcd, cli := startEtcd(t)
	defer etcd.Close()
	defer cli.Close()
	var losses leaseLosses
	in := startLeaseNode(t, etcd, Roles{Ingest: true}, &losses)
	defer in.Close()
	seq := startLeaseNode(t, etcd, Roles{Sequencer: true}, &losses)
	defer seq.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitAllReady(t, ctx, seq)
	// Ready can come with the session, before the campaign key is
	// written (as a standby): wait for the node to lead.
	waitFor(t, 10*time.Second, "the sequencer leading", func() bool { return seq.sequencer.Status().Serving })
	first := seq.sequencer.Status().Epoch

	key, _ := electionKeyOf(t, cli, seq)
	revokeLeaseOf(t, cli, key)
	waitFor(t, 15*time.Second, "the sequencer leading again in a new epoch", func() bool {
		st := seq.sequencer.Status()
		return st.Serving && st.Epoch > first && seq.Ready() == nil
	})
}

// TestRolesComeBackAfterAnEtcdOutage: etcd stops for longer than the
// leases' TTL and comes back on the same data. Without any restart of the
// orderlog processes, the store registers again (same incarnation), the
// sequencer leads again in a new epoch, the reader follows the new leader
// and serves reads, and /readyz answers 503 during the outage and 200
// after. (Writes resuming needs the ingest node's own recovery:
// TestWritesResumeAfterAnEtcdOutage.)
func TestRolesComeBackAfterAnEtcdOutage(t *testing.T) {
	etcd, cli := startEtcd(t)
	defer etcd.Close()
	defer cli.Close()
	var inLosses, seqLosses leaseLosses
	in := startLeaseNode(t, etcd, Roles{Ingest: true}, &inLosses)
	defer in.Close()
	seq := startLeaseNode(t, etcd, Roles{Sequencer: true, Reader: true}, &seqLosses)
	defer seq.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitAllReady(t, ctx, in, seq)
	p, err := dial(t, in).NewProducer(ctx, "app", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	acks, err := p.Produce(ctx, msg("t", "", "before the outage"))
	p.Close()
	if err != nil {
		t.Fatal(err)
	}
	reads := dial(t, seq)
	waitCommitted(t, reads, acks[0].Offset+1)
	first := seq.sequencer.Status().Epoch
	incarnation := in.store.Incarnation()
	storeHolder := "store " + in.store.StoreID()

	etcdOutage(t, etcd, func() bool {
		return inLosses.count(storeHolder) > 0 && seq.sequencer.Ready() != nil
	}, func() {
		if code, body := httpGet(t, seq, "/readyz"); code != http.StatusServiceUnavailable {
			t.Errorf("sequencer node during the outage: /readyz %d %q", code, body)
		}
		if err := in.storeReady(); err == nil {
			t.Error("store ready during the outage, with its lease lost")
		}
	})

	waitFor(t, 20*time.Second, "the store registered again", func() bool {
		return in.storeReady() == nil && registeredIncarnation(t, cli, in) == incarnation
	})
	waitFor(t, 20*time.Second, "a sequencer leading again in a new epoch", func() bool {
		st := seq.sequencer.Status()
		return st.Serving && st.Epoch > first
	})
	waitFor(t, 20*time.Second, "the reader following the new leader", func() bool {
		epoch, _ := seq.reader.Commits().Committed()
		return epoch == int64(seq.sequencer.Status().Epoch)
	})
	if code, body := httpGet(t, seq, "/readyz"); code != http.StatusOK {
		t.Fatalf("sequencer node after the outage: /readyz %d %q", code, body)
	}
	msgs, _ := readAll(t, reads)
	if len(msgs) != 1 || string(msgs[0].Message.Value) != "before the outage" {
		t.Fatalf("read after the outage: %v", values(msgs))
	}
	if n := inLosses.count(storeHolder); n != 1 {
		t.Fatalf("LeaseLost fired %d times for the store, want 1", n)
	}
}

// TestWritesResumeAfterAnEtcdOutage: one process with every role and an
// embedded etcd; etcd stops for longer than the leases' TTL and comes back.
// Without a restart, a producer's message is acknowledged and readable
// again, and /readyz answers 200.
func TestWritesResumeAfterAnEtcdOutage(t *testing.T) {
	var losses leaseLosses
	s := startServerWith(t, Config{DataDir: t.TempDir(), Events: losses.listener(), Ingest: ingest.Config{LeaseTTL: leaseTTL}})
	defer s.Close()
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := c.NewProducer(ctx, "app", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Produce(ctx, msg("t", "", "before")); err != nil {
		t.Fatal(err)
	}
	storeHolder := "store " + s.store.StoreID()

	etcdOutage(t, s.etcd, func() bool {
		return losses.count(storeHolder) > 0 && s.sequencer.Ready() != nil
	}, nil)

	ackCtx, cancelAck := context.WithTimeout(ctx, 30*time.Second)
	defer cancelAck()
	acks, err := p.Produce(ackCtx, msg("t", "", "after"))
	if err != nil {
		t.Fatalf("no ack after the outage: %v", err)
	}
	waitCommitted(t, c, acks[0].Offset+1)
	msgs, _ := readAll(t, c)
	if got := values(msgs); len(got) != 2 || string(msgs[1].Message.Value) != "after" {
		t.Fatalf("read after the outage: %v", got)
	}
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := httpGet(t, s, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after the outage: %d %q", code, body)
	}
}
