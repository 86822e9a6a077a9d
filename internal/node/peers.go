package node

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"orderlog/internal/grpcopt"
)

// While etcd elects a raft leader, every node loses the quorum for a
// second or two, and if no sequencer grants meanwhile (the leader's node
// was the one killed or paused) every node would find itself cut off and
// answer its Producer health NOT_SERVING: producers then hop between the
// live nodes during their takeovers. A node is only waiting, not cut off,
// when a majority of the nodes (itself and the peers that answer) have
// lost the quorum alike: etcd elects. A node that alone lost etcd (its
// member stuck, its etcd ports partitioned) finds its peers with the
// quorum, and an isolated node reaches none; both are cut off.
//
// Each node says whether it doubts the quorum in the health status of
// quorumLostService: SERVING means "yes, no linearizable read for
// quorumDoubtAfter" (sooner than quorumLostAfter, so that a peer's answer
// does not lag this node's own verdict). Said the positive way, a
// stopping node (every status NOT_SERVING), or one that never set it
// (NotFound), does not count as losing the quorum alike. peerWatch asks
// every peer's.
const (
	quorumLostService = "orderlog.v1.EtcdQuorumLost"
	quorumDoubtAfter  = 600 * time.Millisecond
	// peersListEvery is how often the peers are listed from etcd (the
	// last list is kept while etcd cannot answer).
	peersListEvery = 5 * time.Second
	// peersMajorityFor is how long a majority's answer counts: a round
	// of asking takes up to quorumAskFor plus quorumAskEvery.
	peersMajorityFor = quorumLostAfter + quorumAskFor
	// peersAnswerLag is how long after this node's last good read its
	// peers may take to say they doubt the quorum too: their own reads
	// run up to quorumAskEvery apart from this node's, then
	// quorumDoubtAfter, then a readiness refresh.
	peersAnswerLag = quorumDoubtAfter + quorumAskEvery + readinessPoll
)

// peerWatch remembers when this node last found a majority of the nodes
// without the etcd quorum.
type peerWatch struct {
	self         string            // this node's advertised gRPC address
	dial         []grpc.DialOption // how peers are dialed; nil: plaintext
	lastMajority atomic.Int64      // unix nanoseconds; 0: never
	// lastAsked is when the last round that ended began (unix ns).
	lastAsked atomic.Int64

	mu struct {
		sync.Mutex
		peers []string                    // every listed peer, reachable or not
		conns map[string]*grpc.ClientConn // by peer address
	}
}

// run lists the peers in the background and asks them every
// quorumAskEvery until ctx ends.
func (p *peerWatch) run(ctx context.Context, cli *clientv3.Client) {
	var lister sync.WaitGroup
	lister.Go(func() { p.listEvery(ctx, cli) })
	defer func() {
		lister.Wait()
		p.closeAll()
	}()
	t := time.NewTicker(quorumAskEvery)
	defer t.Stop()
	for {
		began := time.Now()
		if p.askAll(ctx) {
			p.lastMajority.Store(time.Now().UnixNano())
		}
		p.lastAsked.Store(began.UnixNano())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// listEvery lists the peers (every process that registered a store, but
// this one) every peersListEvery, whether or not the last try worked.
func (p *peerWatch) listEvery(ctx context.Context, cli *clientv3.Client) {
	t := time.NewTicker(peersListEvery)
	defer t.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, quorumAskFor)
		addrs, err := clientEndpoints(lctx, cli)
		cancel()
		if err == nil {
			p.setPeers(slices.DeleteFunc(addrs, func(a string) bool { return a == p.self }))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *peerWatch) dialOptions() []grpc.DialOption {
	if p.dial == nil {
		return grpcopt.DialOptions()
	}
	return p.dial
}

// setPeers keeps a connection to each address and closes the others'.
func (p *peerWatch) setPeers(addrs []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.peers = slices.Clone(addrs)
	if p.mu.conns == nil {
		p.mu.conns = make(map[string]*grpc.ClientConn)
	}
	for addr, conn := range p.mu.conns {
		if !slices.Contains(addrs, addr) {
			conn.Close()
			delete(p.mu.conns, addr)
		}
	}
	for _, addr := range addrs {
		if _, ok := p.mu.conns[addr]; ok {
			continue
		}
		if conn, err := grpc.NewClient(addr, p.dialOptions()...); err == nil {
			p.mu.conns[addr] = conn
		}
	}
}

// askAll asks every peer at once whether it doubts the quorum and says
// whether this node and the peers that do are a majority of the nodes,
// as soon as they are. With no peer listed it says no: a lone node has
// nobody to tell a partition from an election.
func (p *peerWatch) askAll(ctx context.Context) bool {
	p.mu.Lock()
	total := len(p.mu.peers) + 1
	conns := make([]*grpc.ClientConn, 0, len(p.mu.conns))
	for _, conn := range p.mu.conns {
		conns = append(conns, conn)
	}
	p.mu.Unlock()
	if total == 1 {
		return false
	}
	answers := make(chan bool, len(conns)) // never blocks: the askers end on their own
	for _, conn := range conns {
		go func() { answers <- doubtsQuorum(ctx, conn) }()
	}
	alike := 1 // this node
	for range conns {
		if <-answers {
			alike++
		}
		if isMajority(alike, total) {
			return true
		}
	}
	return false
}

// doubtsQuorum says whether the peer answered, within quorumAskFor, that
// it doubts the etcd quorum too.
func doubtsQuorum(ctx context.Context, conn *grpc.ClientConn) bool {
	actx, cancel := context.WithTimeout(ctx, quorumAskFor)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(actx, &healthpb.HealthCheckRequest{Service: quorumLostService})
	return err == nil && resp.Status == healthpb.HealthCheckResponse_SERVING
}

// isMajority says whether n of total nodes are a strict majority.
func isMajority(n, total int) bool { return 2*n > total }

// reachesMajority says whether a majority was found within
// peersMajorityFor before now.
func (p *peerWatch) reachesMajority(now time.Time) bool {
	last := p.lastMajority.Load()
	return last != 0 && now.Sub(time.Unix(0, last)) < peersMajorityFor
}

// askedSince says whether a round that began at or after t has ended:
// only such a round can tell that the peers do not doubt the quorum
// too, when this node's last good read was peersAnswerLag before t.
func (p *peerWatch) askedSince(t time.Time) bool {
	return p.lastAsked.Load() >= t.UnixNano()
}

func (p *peerWatch) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, conn := range p.mu.conns {
		conn.Close()
		delete(p.mu.conns, addr)
	}
}
