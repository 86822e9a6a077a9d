package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"orderlog/internal/apierr"
)

// ParseEndpoints splits a comma-separated list of node addresses
// ("h1:7070,h2:7070"), trimming spaces and dropping empty items and
// repeats. Each item must be host:port.
func ParseEndpoints(list string) ([]string, error) {
	var endpoints []string
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" || slices.Contains(endpoints, item) {
			continue
		}
		if i := strings.LastIndexByte(item, ':'); i <= 0 || i == len(item)-1 {
			return nil, fmt.Errorf("client: endpoint %q is not host:port", item)
		}
		endpoints = append(endpoints, item)
	}
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("client: no endpoint in %q", list)
	}
	return endpoints, nil
}

// How long an endpoint that failed is passed over when choosing one, and
// how long one attempt of a unary call may take before the next endpoint
// is tried (a paused node accepts connections and never answers).
const (
	endpointDownFor = 3 * time.Second
	attemptTimeout  = 5 * time.Second
)

// endpointSet is the client's list of node addresses and one lazily made
// gRPC connection per address.
//
// Invariant: mu.endpoints holds the seeds in the order given, then the
// learned addresses that are not seeds, sorted; mu.current is one of them.
type endpointSet struct {
	seeds []string
	dial  []grpc.DialOption // every connection's
	mu    struct {
		sync.Mutex
		endpoints []string
		current   string               // where reads and unary calls go first
		spread    int                  // the endpoint index the next producer starts at
		down      map[string]time.Time // when an endpoint last failed
		conns     map[string]*grpc.ClientConn
		closed    bool
	}
}

func newEndpointSet(seeds []string, dial []grpc.DialOption) *endpointSet {
	s := &endpointSet{seeds: seeds, dial: dial}
	s.mu.endpoints = slices.Clone(seeds)
	s.mu.current = seeds[0]
	s.mu.down = make(map[string]time.Time)
	s.mu.conns = make(map[string]*grpc.ClientConn)
	return s
}

// list returns the endpoints, seeds first.
func (s *endpointSet) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.mu.endpoints)
}

// current returns the endpoint calls go to first.
func (s *endpointSet) current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.current
}

// nextProducer returns the endpoint a new producer starts at: the
// endpoints in turn, so that producers spread over the nodes, passing over
// those that failed recently.
func (s *endpointSet) nextProducer() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.mu.endpoints)
	start := s.mu.endpoints[s.mu.spread%n]
	s.mu.spread++
	return s.liveFromLocked(start, 0)
}

// after returns the endpoint to try after addr failed: the next one in the
// list that has not failed recently (or simply the next one if all have).
func (s *endpointSet) after(addr string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.liveFromLocked(addr, 1)
}

// liveFromLocked returns the first endpoint, from addr's position plus
// skip on and around the list, that has not failed in endpointDownFor.
func (s *endpointSet) liveFromLocked(addr string, skip int) string {
	n := len(s.mu.endpoints)
	i := max(slices.Index(s.mu.endpoints, addr), 0) + skip
	for k := 0; k < n; k++ {
		candidate := s.mu.endpoints[(i+k)%n]
		if time.Since(s.mu.down[candidate]) >= endpointDownFor {
			return candidate
		}
	}
	return s.mu.endpoints[i%n]
}

// failed records that a call to addr failed for want of the node; calls go
// to the next endpoint from now on.
func (s *endpointSet) failed(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.down[addr] = time.Now()
	if s.mu.current == addr {
		s.mu.current = s.liveFromLocked(addr, 1)
	}
}

// learn replaces the learned endpoints with those a node reported; an empty
// report (a node that does not know) changes nothing.
func (s *endpointSet) learn(reported []string) {
	if len(reported) == 0 {
		return
	}
	learned := slices.Clone(reported)
	slices.Sort(learned)
	s.mu.Lock()
	defer s.mu.Unlock()
	endpoints := slices.Clone(s.seeds)
	for _, addr := range slices.Compact(learned) {
		if addr != "" && !slices.Contains(endpoints, addr) {
			endpoints = append(endpoints, addr)
		}
	}
	s.mu.endpoints = endpoints
	if !slices.Contains(endpoints, s.mu.current) {
		s.mu.current = endpoints[0]
	}
}

// conn returns addr's connection, made on first use. gRPC connects lazily
// and reconnects after failures.
func (s *endpointSet) conn(addr string) (*grpc.ClientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil, errClientClosed
	}
	if conn, ok := s.mu.conns[addr]; ok {
		return conn, nil
	}
	conn, err := grpc.NewClient(addr, s.dial...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	s.mu.conns[addr] = conn
	return conn, nil
}

func (s *endpointSet) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.closed = true
	var errs []error
	for _, conn := range s.mu.conns {
		errs = append(errs, conn.Close())
	}
	return errors.Join(errs...)
}

// errClientClosed is returned by calls after Close.
var errClientClosed = errors.New("client: closed")

// nodeFailed reports whether err means the node at the other end could not
// serve (refused connection, broken stream, no answer, UNAVAILABLE), so the
// call should move to another endpoint. An ended ctx is the caller's, not
// the node's.
func nodeFailed(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	code := apierr.FromGRPC(err).Code // an *apierr.Error or a gRPC status
	return code == apierr.Unavailable || code == apierr.Timeout
}

// Endpoints returns the node addresses the client knows: those it was
// dialled with, then those the cluster reported in Status.
func (c *Client) Endpoints() []string { return c.endpoints.list() }

// Refresh asks a node for the cluster's endpoints (Admin/Status) and adds
// the nodes it did not know. The client refreshes on Dial and after an
// endpoint fails; Refresh does it now.
func (c *Client) Refresh(ctx context.Context) error {
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	c.endpoints.learn(st.Endpoints)
	return nil
}

// refreshSoon refreshes in the background, once at a time, until Close.
func (c *Client) refreshSoon() {
	if !c.refreshing.CompareAndSwap(false, true) {
		return
	}
	c.background.Add(1)
	go func() {
		defer c.background.Done()
		defer c.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(c.ctx, 2*attemptTimeout)
		defer cancel()
		_ = c.Refresh(ctx)
	}()
}

// unary runs call against the current endpoint and, while nodes fail, the
// next ones: at most once per endpoint, each attempt bounded by
// attemptTimeout.
func (c *Client) unary(ctx context.Context, call func(ctx context.Context, conn *grpc.ClientConn) error) error {
	addr := c.endpoints.current()
	var err error
	for range len(c.endpoints.list()) {
		var conn *grpc.ClientConn
		if conn, err = c.endpoints.conn(addr); err != nil {
			return err
		}
		attemptCtx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err = call(attemptCtx, conn)
		cancel()
		if !nodeFailed(ctx, err) {
			return err
		}
		c.nodeFailed(addr)
		addr = c.endpoints.after(addr)
	}
	return err
}

// nodeFailed moves calls off addr and refreshes the endpoint list.
func (c *Client) nodeFailed(addr string) {
	c.endpoints.failed(addr)
	c.refreshSoon()
}
