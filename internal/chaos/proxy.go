package chaos

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections from a loopback listener to one target
// address and injects faults: it can refuse connections from chosen
// sources (and close theirs), drop every new connection, close every
// existing one, and delay every chunk it forwards.
type Proxy struct {
	listener net.Listener
	target   string
	// owner names the process that dialled an accepted connection ("" if
	// it is not one of the cluster's nodes).
	owner func(conn net.Conn) string

	mu struct {
		sync.Mutex
		blocked  map[string]bool // sources whose connections are refused
		dropNew  bool
		latency  time.Duration
		conns    map[*link]struct{}
		closed   bool
		accepted int
	}
}

// link is one proxied connection pair.
type link struct {
	source         string
	client, server net.Conn
}

func (l *link) close() {
	l.client.Close()
	l.server.Close()
}

// NewProxy listens on listen (a loopback address; port 0 for any free
// one) and forwards to target.
func NewProxy(listen, target string, owner func(net.Conn) string) (*Proxy, error) {
	listener, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{listener: listener, target: target, owner: owner}
	p.mu.blocked = make(map[string]bool)
	p.mu.conns = make(map[*link]struct{})
	go p.serve()
	return p, nil
}

// Addr is the proxy's listen address.
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// Block refuses new connections from source and closes its open ones.
func (p *Proxy) Block(source string) {
	p.mu.Lock()
	p.mu.blocked[source] = true
	var cut []*link
	for l := range p.mu.conns {
		if l.source == source {
			cut = append(cut, l)
		}
	}
	p.mu.Unlock()
	for _, l := range cut {
		l.close()
	}
}

// Unblock lets source connect again.
func (p *Proxy) Unblock(source string) {
	p.mu.Lock()
	delete(p.mu.blocked, source)
	p.mu.Unlock()
}

// DropNew makes the proxy close every new connection at once (drop=true)
// or accept them again.
func (p *Proxy) DropNew(drop bool) {
	p.mu.Lock()
	p.mu.dropNew = drop
	p.mu.Unlock()
}

// SetLatency delays every chunk forwarded in either direction.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.mu.latency = d
	p.mu.Unlock()
}

// CloseAll closes every connection open through the proxy.
func (p *Proxy) CloseAll() {
	p.mu.Lock()
	var cut []*link
	for l := range p.mu.conns {
		cut = append(cut, l)
	}
	p.mu.Unlock()
	for _, l := range cut {
		l.close()
	}
}

// Close stops the listener and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.mu.closed = true
	p.mu.Unlock()
	p.listener.Close()
	p.CloseAll()
}

func (p *Proxy) serve() {
	for {
		conn, err := p.listener.Accept()
		if err != nil {
			return
		}
		go p.handle(conn)
	}
}

func (p *Proxy) handle(client net.Conn) {
	source := ""
	if p.owner != nil {
		source = p.owner(client)
	}
	p.mu.Lock()
	refuse := p.mu.closed || p.mu.dropNew || p.mu.blocked[source]
	p.mu.Unlock()
	if refuse {
		client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		client.Close()
		return
	}
	l := &link{source: source, client: client, server: server}
	p.mu.Lock()
	if p.mu.closed || p.mu.blocked[source] { // blocked while dialling
		p.mu.Unlock()
		l.close()
		return
	}
	p.mu.conns[l] = struct{}{}
	p.mu.accepted++
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client); l.close() }()
	go func() { defer wg.Done(); p.pipe(client, server); l.close() }()
	wg.Wait()
	p.mu.Lock()
	delete(p.mu.conns, l)
	p.mu.Unlock()
}

// pipe copies from src to dst, delaying each chunk by the latency set.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			delay := p.mu.latency
			p.mu.Unlock()
			if delay > 0 {
				time.Sleep(delay)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF or a closed connection: either way done
			return
		}
	}
}
