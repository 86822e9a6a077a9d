package node

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"orderlog/internal/grpcopt"
)

// While etcd elects a raft leader, every node loses the quorum for a
// second or two, and if no sequencer grants meanwhile (the leader's node
// was the one killed) every node would find itself cut off and answer
// its Producer health NOT_SERVING: producers then hop between the live
// nodes during their takeovers. A node that still reaches a majority of
// the nodes (itself and the peers that answer) is not cut off, only
// waiting like the others; an isolated node reaches none. peerWatch asks
// every peer's health service (any answer counts: a peer that itself
// waits still answers) and remembers when a majority last answered.
const peersListEvery = 5 * time.Second

// peerWatch remembers when this node last reached a majority of the
// nodes registered in etcd.
type peerWatch struct {
	self         string       // this node's advertised gRPC address
	lastMajority atomic.Int64 // unix nanoseconds; 0: never

	mu struct {
		sync.Mutex
		conns map[string]*grpc.ClientConn // by peer address
	}
}

// run lists the peers every peersListEvery (keeping the last list while
// etcd cannot answer) and asks them every quorumAskEvery until ctx ends.
func (p *peerWatch) run(ctx context.Context, cli *clientv3.Client) {
	defer p.closeAll()
	t := time.NewTicker(quorumAskEvery)
	defer t.Stop()
	var listed time.Time
	for {
		if time.Since(listed) >= peersListEvery {
			lctx, cancel := context.WithTimeout(ctx, quorumAskFor)
			addrs, err := clientEndpoints(lctx, cli)
			cancel()
			if err == nil {
				p.setPeers(slices.DeleteFunc(addrs, func(a string) bool { return a == p.self }))
				listed = time.Now()
			}
		}
		if p.askAll(ctx) {
			p.lastMajority.Store(time.Now().UnixNano())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// setPeers keeps a connection to each address and closes the others'.
func (p *peerWatch) setPeers(addrs []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
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
		if conn, err := grpc.NewClient(addr, grpcopt.DialOptions()...); err == nil {
			p.mu.conns[addr] = conn
		}
	}
}

// askAll asks every peer at once and says whether this node and the
// peers that answered are a majority of the nodes. With no peer known it
// says no: a lone node has nobody to tell a partition from an election.
func (p *peerWatch) askAll(ctx context.Context) bool {
	p.mu.Lock()
	conns := make([]*grpc.ClientConn, 0, len(p.mu.conns))
	for _, conn := range p.mu.conns {
		conns = append(conns, conn)
	}
	p.mu.Unlock()
	if len(conns) == 0 {
		return false
	}
	var answered atomic.Int32
	var wg sync.WaitGroup
	for _, conn := range conns {
		wg.Go(func() {
			if reached(ctx, conn) {
				answered.Add(1)
			}
		})
	}
	wg.Wait()
	return isMajority(int(answered.Load())+1, len(conns)+1)
}

// reached says whether the peer's gRPC server answered a health check
// within quorumAskFor, whatever it answered.
func reached(ctx context.Context, conn *grpc.ClientConn) bool {
	actx, cancel := context.WithTimeout(ctx, quorumAskFor)
	defer cancel()
	_, err := healthpb.NewHealthClient(conn).Check(actx, &healthpb.HealthCheckRequest{})
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false
	}
	return true
}

// isMajority says whether n of total nodes are a strict majority.
func isMajority(n, total int) bool { return 2*n > total }

// reachesMajority says whether a majority answered within
// quorumLostAfter before now.
func (p *peerWatch) reachesMajority(now time.Time) bool {
	last := p.lastMajority.Load()
	return last != 0 && now.Sub(time.Unix(0, last)) < quorumLostAfter
}

func (p *peerWatch) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, conn := range p.mu.conns {
		conn.Close()
		delete(p.mu.conns, addr)
	}
}
