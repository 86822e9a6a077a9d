package ledger

import (
	"fmt"
	"sync"

	"google.golang.org/grpc"

	"orderlog/internal/grpcopt"
	"orderlog/proto/walpb"
)

// Dialer gives the ledger client a WAL client for an ensemble member. It is
// the only way this package reaches a store, which is also the seam tests
// use to inject faults (drop, delay, reorder, partition).
type Dialer interface {
	// Client returns a client for the member's store. Clients may be shared
	// between ledgers and goroutines.
	Client(m Member) (walpb.WALClient, error)
}

// DialerFunc adapts a function to Dialer.
type DialerFunc func(m Member) (walpb.WALClient, error)

// Client calls f.
func (f DialerFunc) Client(m Member) (walpb.WALClient, error) { return f(m) }

// GRPCDialer dials members by address over gRPC and keeps one connection per
// address. Close it when done.
type GRPCDialer struct {
	options []grpc.DialOption
	mu      struct {
		sync.Mutex
		conns map[string]*grpc.ClientConn
	}
}

// NewGRPCDialer returns a dialer; with no options it uses plaintext
// transport credentials (stores run on a private network or loopback).
func NewGRPCDialer(options ...grpc.DialOption) *GRPCDialer {
	if len(options) == 0 {
		options = grpcopt.DialOptions()
	}
	d := &GRPCDialer{options: options}
	d.mu.conns = make(map[string]*grpc.ClientConn)
	return d
}

// Client returns a client on the cached connection to m.Address.
func (d *GRPCDialer) Client(m Member) (walpb.WALClient, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if conn, ok := d.mu.conns[m.Address]; ok {
		return walpb.NewWALClient(conn), nil
	}
	conn, err := grpc.NewClient(m.Address, d.options...)
	if err != nil {
		return nil, fmt.Errorf("dial store %s at %s: %w", m.StoreID, m.Address, err)
	}
	d.mu.conns[m.Address] = conn
	return walpb.NewWALClient(conn), nil
}

// Close closes every connection.
func (d *GRPCDialer) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var first error
	for addr, conn := range d.mu.conns {
		if err := conn.Close(); err != nil && first == nil {
			first = err
		}
		delete(d.mu.conns, addr)
	}
	return first
}

func dialEnsemble(d Dialer, ensemble []Member) ([]walpb.WALClient, error) {
	clients := make([]walpb.WALClient, len(ensemble))
	for i, m := range ensemble {
		c, err := d.Client(m)
		if err != nil {
			return nil, err
		}
		clients[i] = c
	}
	return clients, nil
}
