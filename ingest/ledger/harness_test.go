package ledger

import (
	"net"
	"os"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"orderlog/proto/walpb"
)

// storeBackend is one incarnation of a store behind a slot.
type storeBackend interface {
	server() walpb.WALServer
	storeID() string
	incarnation() uint64
	// shutdown stops the store; its data stays in the slot's directory.
	shutdown()
}

// openBackend opens the store in dir (a new incarnation if dir is empty).
type openBackend func(t testing.TB, dir string) storeBackend

// storeSlot is one store position of a test cluster, served over real gRPC
// on a loopback port 0. It can crash, restart and lose its disk.
type storeSlot struct {
	name string
	dir  string
	open openBackend
	mu   struct {
		sync.Mutex
		backend storeBackend
		server  *grpc.Server
		conn    *grpc.ClientConn
		client  walpb.WALClient
	}
}

func newSlot(t testing.TB, name string, open openBackend) *storeSlot {
	s := &storeSlot{name: name, dir: t.TempDir(), open: open}
	s.start(t)
	t.Cleanup(s.crash)
	return s
}

func (s *storeSlot) start(t testing.TB) {
	backend := s.open(t, s.dir)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	walpb.RegisterWALServer(srv, backend.server())
	go srv.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.mu.backend, s.mu.server, s.mu.conn, s.mu.client = backend, srv, conn, walpb.NewWALClient(conn)
	s.mu.Unlock()
}

// crash stops serving at once (open streams break) and stops the store.
func (s *storeSlot) crash() {
	s.mu.Lock()
	backend, srv, conn := s.mu.backend, s.mu.server, s.mu.conn
	s.mu.backend, s.mu.server, s.mu.conn, s.mu.client = nil, nil, nil, nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Stop()
	conn.Close()
	backend.shutdown()
}

// restart brings the store back; wipe first deletes its disk, so it comes
// back as a new incarnation.
func (s *storeSlot) restart(t testing.TB, wipe bool) {
	s.crash()
	if wipe {
		if err := os.RemoveAll(s.dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.start(t)
}

func (s *storeSlot) client() (walpb.WALClient, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.client, s.mu.client != nil
}

// member names the slot's current incarnation; Address is the slot name,
// which the fault network routes to whatever server the slot runs now.
func (s *storeSlot) member() Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Member{StoreID: s.mu.backend.storeID(), Incarnation: s.mu.backend.incarnation(), Address: s.name}
}
