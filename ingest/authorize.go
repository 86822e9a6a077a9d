package ingest

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"orderlog/ingest/coordinator"
	"orderlog/ingest/httpapi"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// producerPrincipals remembers which principal each producer id is bound
// to (its etcd record's), and the producer's name, so that a frame is
// checked without an etcd read after the first and a principal's sessions
// are counted by name (producer_limit.go) among its own producers only.
// Producers this node no longer holds are forgotten (of, sweep), so it
// holds about as many as the node's sessions; a frame of a forgotten one
// reads its record again.
type producerPrincipals struct {
	mu    sync.Mutex
	known map[uint64]producerBinding
	// byPrincipal indexes known: principal → producer id → name.
	byPrincipal map[string]map[uint64]string
}

type producerBinding struct{ principal, name string }

func (p *producerPrincipals) get(id uint64) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.known[id]
	return b.principal, ok
}

func (p *producerPrincipals) set(id uint64, principal, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.known == nil {
		p.known, p.byPrincipal = map[uint64]producerBinding{}, map[string]map[uint64]string{}
	}
	p.forgetLocked(id)
	p.known[id] = producerBinding{principal: principal, name: name}
	if p.byPrincipal[principal] == nil {
		p.byPrincipal[principal] = map[uint64]string{}
	}
	p.byPrincipal[principal][id] = name
}

// forgetLocked removes id, and its principal's index once empty.
func (p *producerPrincipals) forgetLocked(id uint64) {
	old, ok := p.known[id]
	if !ok {
		return
	}
	delete(p.known, id)
	delete(p.byPrincipal[old.principal], id)
	if len(p.byPrincipal[old.principal]) == 0 {
		delete(p.byPrincipal, old.principal)
	}
}

// of calls fn with each producer known to be bound to principal, and
// forgets those for which fn returns false.
func (p *producerPrincipals) of(principal string, fn func(id uint64, name string) (keep bool)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, name := range p.byPrincipal[principal] {
		if !fn(id, name) {
			p.forgetLocked(id)
		}
	}
}

// sweepSlack is how many producers more than the node holds sweep lets
// producerPrincipals remember before it walks them all.
const sweepSlack = 1024

// sweep forgets the producers for which held is false once there are
// more than twice holding (the producers the node holds) plus
// sweepSlack: the walk is paid for by the entries added since the last,
// and the producers of a principal that never calls InitProducer again
// (whose walk in of would forget them) do not pile up. Loop only (held
// asks the machine).
func (p *producerPrincipals) sweep(holding int, held func(id uint64) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.known) <= 2*holding+sweepSlack {
		return
	}
	for id := range p.known {
		if !held(id) {
			p.forgetLocked(id)
		}
	}
}

// ProduceQuota is implemented by an Authorizer that also bounds each
// principal's produce bytes per second.
type ProduceQuota interface {
	// ChargeProduce charges a frame's bytes; QUOTA_EXCEEDED (retryable,
	// with retry_after_ms) refuses it when the principal's quota is spent.
	ChargeProduce(principal string, bytes int) error
}

// maxQuotaHoldBack bounds how long a Produce stream over its quota reads
// nothing (a frame much larger than the quota has a retry-after of
// minutes; the stream reads, and refuses, one frame a second meanwhile).
const maxQuotaHoldBack = time.Second

// holdBackOverQuota waits out the retry-after of a frame refused with
// QUOTA_EXCEEDED before its stream reads the next, as Kafka mutes a
// throttled client's channel: a client that ignores the retry-after then
// gains nothing, and costs the node at most a stream's flow-control window
// of bytes per wait instead of decoding and refusing frames as fast as it
// can send them, which took CPU from every other principal. The refusal
// itself is answered at once.
func holdBackOverQuota(ctx context.Context, err error) {
	refusal := apierr.As(err)
	if refusal.Code != apierr.QuotaExceeded {
		return
	}
	ms, _ := strconv.ParseInt(refusal.Details["retry_after_ms"], 10, 64)
	wait := min(time.Duration(ms)*time.Millisecond, maxQuotaHoldBack)
	if wait <= 0 {
		return
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}

// ReadAuthorizer is implemented by an Authorizer that checks reads: a
// frame carrying a consumer group's commit needs read on the commit's
// topics, as a commit made by a member does.
type ReadAuthorizer interface {
	MayRead(principal, topic string) error
}

// callerPrincipal is the caller's principal ("" when no Authorizer is set
// or authentication is off).
func (n *Node) callerPrincipal(ctx context.Context) (string, error) {
	if n.cfg.Authorize == nil {
		return "", nil
	}
	return n.cfg.Authorize.Principal(ctx)
}

// authorizeFrame refuses a frame its caller may not send: a topic without
// the produce ACL, or a producer session bound to another principal.
// Nothing of a refused frame is queued.
func (n *Node) authorizeFrame(ctx context.Context, req *orderlogpb.ProduceRequest) error {
	principal, err := n.callerPrincipal(ctx)
	if err != nil || principal == "" {
		return err
	}
	checked, bytes := "", 0
	for _, m := range req.Messages {
		bytes += len(m.GetValue()) + coordinator.MetadataBytes(m)
		topic := cmp.Or(m.GetTopic(), httpapi.DefaultTopic)
		if topic == checked {
			continue
		}
		if err := n.cfg.Authorize.MayProduce(principal, topic); err != nil {
			return err
		}
		checked = topic
	}
	if c := req.GroupCommit; c != nil {
		reads, ok := n.cfg.Authorize.(ReadAuthorizer)
		for _, o := range c.Offsets {
			if !ok {
				return apierr.New(apierr.PermissionDenied, "this node cannot check a group commit's read ACL")
			}
			if err := reads.MayRead(principal, cmp.Or(o.Topic, httpapi.DefaultTopic)); err != nil {
				return err
			}
		}
	}
	if req.ProducerId != 0 {
		if err := n.checkSessionPrincipal(ctx, req.ProducerId, principal); err != nil {
			return err
		}
	}
	if quota, ok := n.cfg.Authorize.(ProduceQuota); ok {
		return quota.ChargeProduce(principal, bytes)
	}
	return nil
}

// checkSessionPrincipal refuses a frame on a producer session bound to
// another principal.
func (n *Node) checkSessionPrincipal(ctx context.Context, id uint64, principal string) error {
	owner, ok := n.principals.get(id)
	if !ok {
		rec, _, err := getProducer(ctx, n.etcd, id)
		switch {
		case errors.Is(err, errUnknownProducer):
			return apierr.New(apierr.UnknownProducer, "producer %d is not registered", id)
		case err != nil:
			return apierr.New(apierr.Unavailable, "read producer %d: %v", id, err)
		}
		owner = rec.Principal
		if owner != "" { // an unbound producer may be bound by its next InitProducer
			n.principals.set(id, owner, rec.Name)
		}
	}
	if owner != "" && owner != principal {
		return apierr.New(apierr.PermissionDenied, "producer %d belongs to another principal", id)
	}
	return nil
}
