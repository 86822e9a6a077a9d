package etcdserver

import (
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Stop stops the server but keeps its data directory and addresses, so
// that Restart can bring the same member back: an etcd outage, as tests
// make one. Clients keep retrying meanwhile; leases they cannot renew for
// their TTL are lost. Stop, Restart and Close must not run concurrently
// with each other or with Endpoint and NewClient.
//
// Requests fail from the moment Stop is called; it returns once the server
// has closed its client streams, which takes several seconds while clients
// are connected.
func (s *Server) Stop() {
	s.etcd.Server.HardStop() // no more raft: lease renewals fail at once
	s.etcd.Close()
}

// Restart starts a stopped server again on the same data directory and
// the same client and peer addresses, and waits until it serves clients.
// The keys survive; a lease survives only if a client renews it within
// its TTL of the restart.
func (s *Server) Restart() error {
	cfg := s.etcd.Config()
	// Port 0 was resolved when the server first started: clients know the
	// real port, so the member must come back on it.
	client := url.URL{Scheme: s.scheme(), Host: s.etcd.Clients[0].Addr().String()}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	e, err := embed.StartEtcd(&cfg)
	if err != nil {
		return fmt.Errorf("restart embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return ErrNotReady
	}
	s.etcd = e
	return nil
}
