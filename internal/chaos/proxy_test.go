package chaos

import (
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer echoes every connection until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return l.Addr().String()
}

func roundTrip(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	_, err = io.ReadFull(c, buf)
	return err
}

func TestProxyBlocksASourceAndCutsItsConnections(t *testing.T) {
	self := map[string]int{"me": os.Getpid()}
	p, err := NewProxy("127.0.0.1:0", echoServer(t), func(c net.Conn) string { return socketOwner(c, self) })
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := roundTrip(p.Addr()); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	open, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	open.Write([]byte("x"))
	io.ReadFull(open, make([]byte, 1))
	p.Block("me") // this process is "me": its open connection is cut
	open.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := open.Read(make([]byte, 1)); err == nil {
		t.Fatal("open connection survived the block")
	}
	if err := roundTrip(p.Addr()); err == nil {
		t.Fatal("blocked source got through")
	}
	p.Unblock("me")
	if err := roundTrip(p.Addr()); err != nil {
		t.Fatalf("after unblock: %v", err)
	}
	p.DropNew(true)
	if err := roundTrip(p.Addr()); err == nil {
		t.Fatal("DropNew let a connection through")
	}
	p.DropNew(false)
	p.SetLatency(50 * time.Millisecond)
	start := time.Now()
	if err := roundTrip(p.Addr()); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 100*time.Millisecond {
		t.Fatalf("latency not applied: round trip took %s", time.Since(start))
	}
}
