package node

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// HTTP/2 frames, written by hand: the tests speak below gRPC's client,
// which never pings more often than every 10 s.
const (
	h2Settings     = 0x4
	h2Ping         = 0x6
	h2GoAway       = 0x7
	h2PingAck      = 0x1
	h2EnhanceCalm  = 0xb
	h2ClientPrefix = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
)

// h2Conn is a bare HTTP/2 connection to the gRPC port, past its preface.
type h2Conn struct {
	net.Conn
	r *bufio.Reader
}

func dialH2(t *testing.T, s *Server) *h2Conn {
	t.Helper()
	conn, err := net.Dial("tcp", s.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write(append([]byte(h2ClientPrefix), h2Frame(h2Settings, 0, nil)...)); err != nil {
		t.Fatal(err)
	}
	return &h2Conn{Conn: conn, r: bufio.NewReader(conn)}
}

func h2Frame(kind, flags byte, payload []byte) []byte {
	frame := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), kind, flags, 0, 0, 0, 0}
	return append(frame, payload...)
}

func (c *h2Conn) ping(i uint64) error {
	_, err := c.Write(h2Frame(h2Ping, 0, binary.BigEndian.AppendUint64(nil, i)))
	return err
}

// next reads frames until a ping's answer (true) or a GOAWAY (false, with
// its error code and debug data).
func (c *h2Conn) next(t *testing.T, wait time.Duration) (pong bool, code uint32, debug string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	for {
		header := make([]byte, 9)
		if _, err := io.ReadFull(c.r, header); err != nil {
			t.Fatalf("the connection ended without a GOAWAY: %v", err)
		}
		payload := make([]byte, int(header[0])<<16|int(header[1])<<8|int(header[2]))
		if _, err := io.ReadFull(c.r, payload); err != nil {
			t.Fatal(err)
		}
		switch {
		case header[3] == h2Ping && header[4]&h2PingAck != 0:
			return true, 0, ""
		case header[3] == h2GoAway:
			return false, binary.BigEndian.Uint32(payload[4:8]), string(payload[8:])
		}
	}
}

// closed reports whether the node closes the connection within wait.
func (c *h2Conn) closed(wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, c.r)
	ne, timedOut := err.(net.Error)
	return !timedOut || !ne.Timeout()
}

// TestPingingTooOftenEndsTheConnection: the gRPC port enforces its
// keepalive policy. A client that pings without pause (the cheapest way to
// keep a node busy without a call or credentials) is sent GOAWAY
// ENHANCE_YOUR_CALM ("too_many_pings") after a few pings and its
// connection is closed, while other clients are served; one that pings
// every 5 s, without a stream, is answered every time (the ingest nodes'
// grant streams ping every 10 s, and gRPC's default policy would take
// any ping without a stream for abuse).
func TestPingingTooOftenEndsTheConnection(t *testing.T) {
	n := startAbuseNode(t, Config{}, "good")
	flood := dialH2(t, n.s)
	go func() { // pings until the node hangs up
		for i := uint64(0); flood.ping(i) == nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}()
	pongs := 0
	for {
		pong, code, debug := flood.next(t, 10*time.Second)
		if pong {
			pongs++
			continue
		}
		if code != h2EnhanceCalm || !strings.Contains(debug, "too_many_pings") {
			t.Fatalf("GOAWAY %#x %q, want ENHANCE_YOUR_CALM too_many_pings", code, debug)
		}
		break
	}
	if pongs > 5 {
		t.Fatalf("%d pings answered before the GOAWAY", pongs)
	}
	if !flood.closed(5 * time.Second) {
		t.Fatal("the connection stays open after the GOAWAY")
	}
	if code := n.produce(t, n.conn, "good"); code != "" {
		t.Fatalf("another client's frame: %q", code)
	}
	if testing.Short() {
		return
	}
	patient := dialH2(t, n.s)
	for i := range uint64(4) { // the first ping is free, 3 strikes would end it
		if i > 0 {
			time.Sleep(5*time.Second + 200*time.Millisecond) // the policy's interval is the test's input
		}
		if err := patient.ping(i); err != nil {
			t.Fatal(err)
		}
		if pong, code, debug := patient.next(t, 5*time.Second); !pong {
			t.Fatalf("ping %d, 5 s after the last: GOAWAY %#x %q", i+1, code, debug)
		}
	}
	if patient.closed(time.Second) { // a GOAWAY comes after the answer to the ping that earned it
		t.Fatal("a client pinging every 5 s lost its connection")
	}
}
