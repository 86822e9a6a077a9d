package node

import (
	"net"
	"sync"
)

// limitedListener bounds the connections open from each remote IP address
// (Limits.ConnectionsPerAddress). A connection over the bound is closed as
// soon as it is accepted: nothing has been said on it yet, so there is no
// protocol to answer in (with TLS not even a handshake), and the client
// sees its connection reset. The gRPC and HTTP listeners share one count.
// Connections from the addresses the cluster's nodes registered, this
// node's own included (holdings.peers, limits_peers.go), are not counted:
// the node's calls to itself and its peers' must not be refused because a
// client shares their address.
type limitedListener struct {
	net.Listener
	holdings *holdings
}

func (h *holdings) listener(l net.Listener) net.Listener {
	if h.limits.ConnectionsPerAddress <= 0 {
		return l
	}
	return limitedListener{Listener: l, holdings: h}
}

// Accept returns the next connection whose address is below its bound,
// closing those that are not; it never fails for them, which would stop
// the server's accept loop.
func (l limitedListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		address := remoteIP(conn)
		if l.holdings.peers.has(address) {
			return conn, nil
		}
		if l.holdings.connections.Acquire(address, l.holdings.limits.ConnectionsPerAddress) {
			return &countedConn{Conn: conn, release: func() { l.holdings.connections.Release(address) }}, nil
		}
		l.holdings.refusals.WithLabelValues(limitConnections).Inc()
		_ = conn.Close()
	}
}

// remoteIP is the connection's remote IP address without its port.
func remoteIP(conn net.Conn) string {
	addr := conn.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// countedConn gives its address's count back on its first Close (servers
// may close a connection more than once).
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
