package node

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"orderlog/ingest/ledger"
	"orderlog/internal/apierr"
	"orderlog/internal/grpcopt"
	"orderlog/internal/keys"
	"orderlog/sequencer"
)

// maxConsoleStores bounds the stores GET /v1/console/cluster lists and
// asks for their health: a console tab polls it.
const maxConsoleStores = 64

// consoleHealthTimeout bounds each store's health check.
const consoleHealthTimeout = time.Second

// consoleStore is one WAL store (a node) as the console's Overview shows
// it: its registration in etcd, and the answer of its gRPC health check.
type consoleStore struct {
	StoreID     string `json:"store_id"`
	Incarnation uint64 `json:"incarnation"`
	Address     string `json:"address"`
	Damaged     bool   `json:"damaged"` // its journal lost records (docs/operations.md)
	Health      string `json:"health"`  // SERVING, NOT_SERVING, or why it did not answer
	Self        bool   `json:"self"`
}

// mountConsoleCluster serves GET /v1/console/cluster: the sequencer's
// leader and every registered store with its health, for the Overview.
// Like /v1/status it needs an authenticated principal only: it names
// addresses, not messages.
func (s *Server) mountConsoleCluster(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/console/cluster", s.serveConsoleCluster)
}

func (s *Server) serveConsoleCluster(w http.ResponseWriter, r *http.Request) {
	if _, err := s.auth.callPrincipal(r.Context()); err != nil {
		apierr.WriteHTTP(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	leader, err := sequencer.Leader(ctx, s.cli)
	if err != nil {
		apierr.WriteHTTP(w, apierr.New(apierr.Unavailable, "etcd: %v", err))
		return
	}
	resp, err := s.cli.Get(ctx, keys.StoresPrefix, clientv3.WithPrefix(), clientv3.WithLimit(maxConsoleStores+1))
	if err != nil {
		apierr.WriteHTTP(w, apierr.New(apierr.Unavailable, "etcd: %v", err))
		return
	}
	stores := []consoleStore{}
	for _, kv := range resp.Kvs[:min(len(resp.Kvs), maxConsoleStores)] {
		m, err := ledger.DecodeStoreRegistration(kv.Value)
		if err != nil {
			continue
		}
		stores = append(stores, consoleStore{StoreID: m.StoreID, Incarnation: m.Incarnation, Address: m.Address,
			Damaged: m.MayHideThrough > 0, Self: s.store != nil && m.StoreID == s.store.StoreID()})
	}
	s.checkStoresHealth(ctx, stores)
	sort.Slice(stores, func(i, j int) bool { return stores[i].Address < stores[j].Address })
	writeConsoleJSON(w, map[string]any{"sequencer_leader": leader.Addr, "stores": stores,
		"more_stores": len(resp.Kvs) > maxConsoleStores})
}

// checkStoresHealth asks each store's node for its gRPC health, at once.
func (s *Server) checkStoresHealth(ctx context.Context, stores []consoleStore) {
	var wg sync.WaitGroup
	for i := range stores {
		wg.Go(func() { stores[i].Health = s.healthOf(ctx, stores[i].Address) })
	}
	wg.Wait()
}

func (s *Server) healthOf(ctx context.Context, addr string) string {
	conn, err := grpc.NewClient(addr, grpcopt.DialOptionsWith(s.peerCredentials())...)
	if err != nil {
		return "unreachable: " + err.Error()
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, consoleHealthTimeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return "unreachable: " + apierr.FromGRPC(err).Message
	}
	return resp.Status.String()
}
