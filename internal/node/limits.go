package node

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"orderlog/internal/apierr"
	"orderlog/internal/auth"
)

// Limits bound what one principal or one remote address holds open on this
// node at once (docs/security.md, "Abuse limits"); quotas bound bytes per
// second. A connection has no principal of its own — gRPC authenticates
// each call, and one connection may carry several principals' calls — so
// connections are counted per remote address at the listeners, and what a
// principal holds (streams, producer sessions) per principal. With
// authentication off there are no principals: only the connection limit
// applies. 0 means the default; a negative value, no limit.
type Limits struct {
	// StreamsPerPrincipal bounds a principal's open streams: gRPC streams
	// of the public services (Produce, Read, Tail, Query, Consume, Arrow
	// Flight) and HTTP consumer-group streams.
	StreamsPerPrincipal int
	// ConnectionsPerAddress bounds the TCP connections open from one
	// remote IP address to the gRPC and HTTP ports together.
	ConnectionsPerAddress int
	// ProducersPerPrincipal bounds the producer sessions a principal holds
	// on this node; InitProducer of one more is refused (a session it
	// holds may always be initialized again).
	ProducersPerPrincipal int
}

// The limits' defaults: far above what a client needs (the Go client opens
// one connection per node and a stream per producer or reader) and far
// below what exhausts a node (each stream and connection holds buffers of
// 256 KiB or more, each producer session its state).
const (
	DefaultStreamsPerPrincipal   = 1024
	DefaultConnectionsPerAddress = 1024
	DefaultProducersPerPrincipal = 1024
)

// Validate fills the defaults.
func (l *Limits) Validate() error {
	for _, v := range []*int{&l.StreamsPerPrincipal, &l.ConnectionsPerAddress, &l.ProducersPerPrincipal} {
		if *v < -1 {
			return errors.New("node: a limit is -1 (none), 0 (the default) or positive")
		}
	}
	fill := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	fill(&l.StreamsPerPrincipal, DefaultStreamsPerPrincipal)
	fill(&l.ConnectionsPerAddress, DefaultConnectionsPerAddress)
	fill(&l.ProducersPerPrincipal, DefaultProducersPerPrincipal)
	return nil
}

// The limit label of orderlog_limit_refusals_total.
const (
	limitStreams     = "streams_per_principal"
	limitConnections = "connections_per_address"
	limitProducers   = "producers_per_principal"
)

// holdings are the counts the limits are checked against, and the
// refusals' counter.
type holdings struct {
	limits      Limits
	streams     auth.Holdings // by principal
	connections auth.Holdings // by remote IP address
	// peers are the addresses not counted in connections (nil: none);
	// set before the listeners accept.
	peers    *peerAddresses
	refusals *prometheus.CounterVec
}

func newHoldings(limits Limits) *holdings {
	return &holdings{limits: limits, refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orderlog_limit_refusals_total",
		Help: "Streams and producer sessions refused (LIMIT_EXCEEDED) and connections closed at accept, by the limit reached."},
		[]string{"limit"})}
}

// refused counts a refusal and returns its LIMIT_EXCEEDED error.
func (h *holdings) refused(limit string, max int, what string) error {
	h.refusals.WithLabelValues(limit).Inc()
	return apierr.New(apierr.LimitExceeded, "%s: at most %d at once; retry once one ends", what, max).
		With("limit", limit).With("retry_after_ms", "1000")
}

// openStream counts one of principal's streams, or refuses it at the
// limit; release ends it. No principal (authentication off): no count.
func (h *holdings) openStream(principal string) (release func(), err error) {
	if principal == "" {
		return func() {}, nil
	}
	if !h.streams.Acquire(principal, h.limits.StreamsPerPrincipal) {
		return nil, h.refused(limitStreams, h.limits.StreamsPerPrincipal, "the principal's open streams")
	}
	return func() { h.streams.Release(principal) }, nil
}

// AdmitProducer makes the guard the ingest node's producer-session limit
// (ingest.ProducerSessionLimit). Only the sessions active within window
// count, so the refusal says when one may stop counting: retryAfter, if
// the client's least recently active session stays idle.
func (g *authGuard) AdmitProducer(principal string, active int, window, retryAfter time.Duration) error {
	h := g.holdings
	limit := h.limits.ProducersPerPrincipal
	if limit <= 0 || active < limit {
		return nil
	}
	h.refusals.WithLabelValues(limitProducers).Inc()
	retryAfter = max(retryAfter, time.Second).Round(time.Second)
	return apierr.New(apierr.LimitExceeded, "the principal's producer sessions active on this node in the last %v (%d): at most %d; "+
		"retry once one has been idle for %v (in %v at the soonest), or initialize a session it holds again", window, active, limit, window, retryAfter).
		With("limit", limitProducers).With("retry_after_ms", strconv.FormatInt(retryAfter.Milliseconds(), 10))
}
