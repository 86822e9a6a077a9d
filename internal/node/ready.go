package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"orderlog/internal/event"
	"orderlog/proto/ingestpb"
	"orderlog/proto/orderlogpb"
	"orderlog/proto/sequencerpb"
	"orderlog/proto/walpb"
)

// Readiness is answered in three places that must agree: GET /readyz, the
// gRPC health service (grpc.health.v1) and Server.Ready. A role is ready
// when it can serve its part:
//   - sequencer: a standby campaigning with a live etcd session, or the
//     leader once it grants;
//   - ingest: registered, with a grant stream to the sequencer leader
//     (ingest.Node.Ready);
//   - reader (also run by the ingest role, for the HTTP API's reads): a
//     first watermark of the commit map applied, so a read below C works;
//   - WAL store: open and registered in etcd under a live lease (not while
//     it registers again after losing its lease).
//
// A process is ready when all its roles are.

// roleReadiness is one role's readiness and the gRPC services it backs.
type roleReadiness struct {
	role     string
	services []string
	err      error
}

// roles lists the readiness of each role this process runs.
func (s *Server) roles() []roleReadiness {
	var out []roleReadiness
	if s.sequencer != nil {
		out = append(out, roleReadiness{"sequencer", []string{sequencerpb.Sequencer_ServiceDesc.ServiceName}, s.sequencerReady()})
	}
	if s.store != nil {
		out = append(out, roleReadiness{"store", []string{walpb.WAL_ServiceDesc.ServiceName}, s.storeReady()})
	}
	if s.ingest != nil {
		out = append(out, roleReadiness{"ingest", []string{ingestpb.IngestPeer_ServiceDesc.ServiceName}, s.ingest.Ready()})
	}
	if s.reader != nil {
		out = append(out, roleReadiness{"reader", []string{orderlogpb.Reader_ServiceDesc.ServiceName}, s.readerReady()})
	}
	for i, r := range out { // every reason names its role once
		if r.err != nil && !strings.HasPrefix(r.err.Error(), r.role+":") {
			out[i].err = fmt.Errorf("%s: %w", r.role, r.err)
		}
	}
	return out
}

func (s *Server) sequencerReady() error {
	if wait := s.sequencerWait.Load(); wait != nil {
		return fmt.Errorf("sequencer: waiting for stores for its commit ledger: %w", *wait)
	}
	return s.sequencer.Ready()
}

func (s *Server) storeReady() error {
	if s.registration == nil {
		return errors.New("store: not registered in etcd yet")
	}
	return s.registration.ready()
}

// errReaderNotInStep: the reader has applied no watermark yet, and reads
// answer UNAVAILABLE.
var errReaderNotInStep = errors.New("reader: waiting for the first watermark of the sequencer's commit map (reads answer UNAVAILABLE)")

func (s *Server) readerReady() error {
	if epoch, _ := s.reader.Commits().Committed(); epoch == 0 {
		return errReaderNotInStep
	}
	return nil
}

// Ready returns nil when every role of the process is ready, else an error
// naming each role that is not and what it waits for.
func (s *Server) Ready() error { return overall(s.roles()) }

// overall joins the reasons of the roles that are not ready, one a line.
func overall(roles []roleReadiness) error {
	var reasons []string
	for _, r := range roles {
		if r.err != nil {
			reasons = append(reasons, r.err.Error())
		}
	}
	if len(reasons) > 0 {
		return errors.New(strings.Join(reasons, "\n"))
	}
	return nil
}

// readiness publishes the process's readiness to the gRPC health service
// and to Events.ReadinessChanged.
type readiness struct {
	server *Server
	health *health.Server
	events event.Listener
	// refused is why this node cannot own producers now (nil: it can),
	// as of the last refresh.
	refused atomic.Pointer[error]
	mu      struct {
		sync.Mutex
		known  bool
		ready  bool
		reason string
	}
}

// registerObservability registers the health service and server
// reflection on srv; their statuses start NOT_SERVING.
func (s *Server) registerObservability(srv *grpc.Server) {
	s.readiness = &readiness{server: s, health: health.NewServer(), events: s.events}
	starting := error(errStarting)
	s.readiness.refused.Store(&starting) // until the first refresh
	s.readiness.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, s.readiness.health)
	reflection.Register(srv)
}

// readinessPoll is how often the health service's statuses are refreshed
// between /readyz requests (each of which refreshes them too).
const readinessPoll = 50 * time.Millisecond

// run refreshes the statuses until ctx ends, then marks everything
// NOT_SERVING.
func (r *readiness) run(ctx context.Context) {
	t := time.NewTicker(readinessPoll)
	defer t.Stop()
	for {
		r.refresh()
		select {
		case <-ctx.Done():
			r.health.Shutdown()
			return
		case <-t.C:
		}
	}
}

// refresh evaluates every role, publishes the statuses, and returns the
// process's readiness.
func (r *readiness) refresh() error {
	roles := r.server.roles()
	for _, role := range roles {
		for _, svc := range role.services {
			r.health.SetServingStatus(svc, servingStatus(role.err))
		}
	}
	if r.server.ingest != nil {
		// The Producer service says whether this node can own producers
		// (it is not in the ingest role's list, whose readiness also waits
		// for a grant stream): clients whose frames stall probe it and move
		// elsewhere when it cannot. While no sequencer leader grants, every
		// node waits alike, and moving would only hand producers around;
		// a node that has neither a grant stream nor the etcd quorum, while
		// no majority of the nodes lost the quorum alike, is cut off, though
		// (quorum.go, peers.go).
		lost := healthpb.HealthCheckResponse_NOT_SERVING
		if r.server.quorum.doubted(time.Now()) {
			lost = healthpb.HealthCheckResponse_SERVING // yes, lost (peers.go)
		}
		r.health.SetServingStatus(quorumLostService, lost)
		refused := r.server.canOwnProducers()
		r.refused.Store(&refused)
		r.health.SetServingStatus(orderlogpb.Producer_ServiceDesc.ServiceName, servingStatus(refused))
	}
	err := overall(roles)
	r.health.SetServingStatus("", servingStatus(err))
	r.health.SetServingStatus(orderlogpb.Admin_ServiceDesc.ServiceName, servingStatus(err))
	r.note(err)
	return err
}

// errStarting refuses producer calls until the first readiness refresh.
var errStarting = errors.New("node: starting")

// producersRefused is canOwnProducers as the last refresh found it, for
// every HTTP producer call to read cheaply (cutoff.go).
func (r *readiness) producersRefused() error {
	if err := r.refused.Load(); err != nil {
		return *err
	}
	return nil
}

// canOwnProducers is the Producer health status's reason (nil: SERVING).
func (s *Server) canOwnProducers() error {
	if err := s.ingest.Registered(); err != nil {
		return err
	}
	// This node's own sequencer leader grants in-process whether or not
	// it is cut off: its stream proves nothing then.
	leadsHere := s.sequencer != nil && s.sequencer.Status().Serving
	if s.ingest.HasGrantStream() && !leadsHere {
		return nil
	}
	now := time.Now()
	err := s.quorum.lost(now)
	if err == nil || s.peers.reachesMajority(now) {
		return nil // etcd elects: a majority of the nodes waits alike (peers.go)
	}
	if !s.peers.askedSince(s.quorum.lastOKAt().Add(peersAnswerLag)) {
		return nil // the peers may not have said yet that they lost it too
	}
	return err
}

func servingStatus(notReady error) healthpb.HealthCheckResponse_ServingStatus {
	if notReady != nil {
		return healthpb.HealthCheckResponse_NOT_SERVING
	}
	return healthpb.HealthCheckResponse_SERVING
}

// note fires ReadinessChanged when the readiness changed.
func (r *readiness) note(err error) {
	reason := ""
	if err != nil {
		reason = err.Error()
	}
	r.mu.Lock()
	changed := !r.mu.known || r.mu.ready != (err == nil) || r.mu.reason != reason
	r.mu.known, r.mu.ready, r.mu.reason = true, err == nil, reason
	r.mu.Unlock()
	if changed {
		r.events.ReadinessChanged(event.ReadinessInfo{Ready: err == nil, Reason: reason})
	}
}

// serveReadyz answers GET /readyz: 200 "ready" when every role is ready,
// else 503 "not ready" and one line per role that is not, saying what it
// waits for.
func (r *readiness) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := r.refresh(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready\n%s\n", err)
		return
	}
	fmt.Fprintln(w, "ready")
}

// serveHealthz answers GET /healthz: the process is alive.
func serveHealthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintln(w, `{"status":"ok"}`)
}
