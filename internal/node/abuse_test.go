package node

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// TestAStreamFloodIsRefusedAlone: a principal holding as many open streams
// as it may has its next ones refused with LIMIT_EXCEEDED (gRPC
// RESOURCE_EXHAUSTED, HTTP 429 for a consumer stream) — on the same
// connection as another principal, which goes on producing and opening
// streams — and may open one again once one of its streams ends.
func TestAStreamFloodIsRefusedAlone(t *testing.T) {
	const limit = 8
	n := startAbuseNode(t, Config{Limits: Limits{StreamsPerPrincipal: limit}}, "flood", "good")
	held := make([]orderlogpb.Producer_ProduceClient, 0, limit)
	for range limit {
		stream, err := orderlogpb.NewProducerClient(n.conn).Produce(n.as("flood"))
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&orderlogpb.ProduceRequest{Messages: []*orderlogpb.Message{{Topic: "t", Value: []byte("f")}}}); err != nil {
			t.Fatal(err)
		}
		if resp, err := stream.Recv(); err != nil || resp.ErrorCode != "" {
			t.Fatalf("the flood's stream %d of %d: %v %v", len(held)+1, limit, err, resp)
		}
		held = append(held, stream)
	}
	refused := 0
	for range 20 {
		stream, err := orderlogpb.NewReaderClient(n.conn).Tail(n.as("flood"), &orderlogpb.TailRequest{})
		if code := streamCode(stream, err); code == apierr.LimitExceeded {
			refused++
		} else {
			t.Fatalf("a stream past the limit: %q", code)
		}
		if code := n.produce(t, n.conn, "good"); code != "" {
			t.Fatalf("the good principal's frame on the same connection: %q", code)
		}
	}
	if code := n.produce(t, n.conn, "flood"); code != apierr.LimitExceeded {
		t.Fatalf("the flood's produce stream past the limit: %q", code)
	}
	status, _, body := httpDo(t, "GET", "http://"+n.s.HTTPAddr()+"/v1/consumers/g/stream?topic=t", "",
		map[string]string{"Authorization": "Bearer " + n.tokens["flood"]})
	if status != 429 || !strings.Contains(body, "LIMIT_EXCEEDED") {
		t.Fatalf("the flood's HTTP consumer stream past the limit: %d %s", status, body)
	}
	// the good principal may hold as many streams as the flood does, once
	// its produce streams above have ended
	n.waitStreamsEnded(t, "good")
	for range limit {
		stream, err := orderlogpb.NewReaderClient(n.conn).Tail(n.as("good"), &orderlogpb.TailRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil { // the first page: the stream is open
			t.Fatalf("the good principal's tail: %v", err)
		}
	}
	if got := n.refusals(t, limitStreams); got != refused+2 {
		t.Fatalf("orderlog_limit_refusals_total{limit=%q} = %d, want %d", limitStreams, got, refused+2)
	}
	_ = held[0].CloseSend()
	if _, err := held[0].Recv(); err != io.EOF {
		t.Fatalf("closing a stream: %v", err)
	}
	waitFor(t, 10*time.Second, "the flood to open a stream again once one ended", func() bool {
		return n.produce(t, n.conn, "flood") == ""
	})
}

// TestAConnectionFloodIsRefusedAlone: connections from one address past
// --max-connections-per-address are closed as soon as they are accepted,
// on the gRPC and the HTTP port alike, while a client from another
// address connects and produces; once the flood lets its connections go,
// its address may connect again.
func TestAConnectionFloodIsRefusedAlone(t *testing.T) {
	const limit = 8
	n := startAbuseNode(t, Config{Limits: Limits{ConnectionsPerAddress: limit}}, "flood", "good")
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	closedAtOnce := 0
	for i := range 3 * limit {
		port := n.s.GRPCAddr()
		if i%2 == 1 {
			port = n.s.HTTPAddr() // one count for both ports
		}
		c, err := dialer.Dial("tcp", port)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		if i < limit { // accepted before the next is dialed: the two ports' accept loops race otherwise
			waitFor(t, 5*time.Second, "the connection to be accepted", func() bool {
				return n.s.auth.holdings.connections.Held("127.0.0.2") == i+1
			})
		} else if closedByServer(c, 2*time.Second) {
			closedAtOnce++
		}
	}
	if closedAtOnce != 2*limit {
		t.Fatalf("%d of the %d connections past the limit were closed at once", closedAtOnce, 2*limit)
	}
	for _, c := range open[:limit] {
		if closedByServer(c, 50*time.Millisecond) {
			t.Fatal("a connection within the limit was closed")
		}
	}
	// another address, a new connection: served
	if code := n.produce(t, dialFrom(t, n.s, "127.0.0.3"), "good"); code != "" {
		t.Fatalf("the good principal from another address: %q", code)
	}
	if code := n.produce(t, n.conn, "good"); code != "" {
		t.Fatalf("the good principal on its connection: %q", code)
	}
	if got := n.refusals(t, limitConnections); got != 2*limit {
		t.Fatalf("orderlog_limit_refusals_total{limit=%q} = %d, want %d", limitConnections, got, 2*limit)
	}
	for _, c := range open {
		c.Close()
	}
	open = nil
	flood := dialFrom(t, n.s, "127.0.0.2")
	waitFor(t, 10*time.Second, "the flood's address to connect again", func() bool { return n.produce(t, flood, "flood") == "" })
}

// closedByServer reports whether the server closes c within wait (a read
// ends with EOF or a reset rather than its deadline).
func closedByServer(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// TestAProducerSessionFloodIsRefusedAlone: a principal holding as many
// producer sessions as it may on the node has InitProducer of a new one
// refused with LIMIT_EXCEEDED, gRPC and HTTP, and nothing registered;
// it may still initialize one it holds again (a client restarting), and
// another principal registers its own meanwhile.
func TestAProducerSessionFloodIsRefusedAlone(t *testing.T) {
	const limit = 3
	n := startAbuseNode(t, Config{Limits: Limits{ProducersPerPrincipal: limit}}, "flood", "good", "burst")
	producers := orderlogpb.NewProducerClient(n.conn)
	for i := range limit {
		if _, err := producers.InitProducer(n.as("flood"), &orderlogpb.InitProducerRequest{Name: "flood-" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := producers.InitProducer(n.as("flood"), &orderlogpb.InitProducerRequest{Name: "flood-new"})
	if codeOf(err) != apierr.LimitExceeded || !strings.Contains(err.Error(), "idle for 5m0s") {
		t.Fatalf("a session past the limit: %v", err)
	}
	status, _, body := httpDo(t, "POST", "http://"+n.s.HTTPAddr()+"/v1/producers", `{"name":"flood-http"}`,
		map[string]string{"Authorization": "Bearer " + n.tokens["flood"]})
	// the sessions are seconds old: they count for the rest of 5 minutes
	_, ms, _ := strings.Cut(body, `"retry_after_ms":"`)
	if after, _ := strconv.Atoi(strings.SplitN(ms, `"`, 2)[0]); status != 429 ||
		!strings.Contains(body, "LIMIT_EXCEEDED") || after < 200_000 {
		t.Fatalf("a session past the limit over HTTP: %d %s", status, body)
	}
	if resp, err := producers.InitProducer(n.as("flood"), &orderlogpb.InitProducerRequest{Name: "flood-0"}); err != nil || resp.Epoch != 2 {
		t.Fatalf("initializing a held session again at the limit: %v %v", resp, err)
	}
	for i := range limit {
		if _, err := producers.InitProducer(n.as("good"), &orderlogpb.InitProducerRequest{Name: "good-" + strconv.Itoa(i)}); err != nil {
			t.Fatalf("the good principal's producer %d: %v", i, err)
		}
	}
	// InitProducers at once: the ones in flight count, exactly the limit pass
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[apierr.Code]int{}
	for i := range 12 {
		wg.Go(func() {
			_, err := producers.InitProducer(n.as("burst"), &orderlogpb.InitProducerRequest{Name: "burst-" + strconv.Itoa(i)})
			mu.Lock()
			codes[codeOf(err)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[""] != limit || codes[apierr.LimitExceeded] != 12-limit {
		t.Fatalf("12 InitProducers at once with a limit of %d: %v", limit, codes)
	}
	if got := n.refusals(t, limitProducers); got != 2+12-limit {
		t.Fatalf("orderlog_limit_refusals_total{limit=%q} = %d, want %d", limitProducers, got, 2+12-limit)
	}
	// nothing was registered for the refused names: the root, not bound
	// by the flood's limit, gets them as new producers (epoch 1)
	for _, name := range []string{"flood-new", "flood-http"} {
		if resp, err := producers.InitProducer(as(n.ctx, n.root), &orderlogpb.InitProducerRequest{Name: name}); err != nil || resp.Epoch != 1 {
			t.Fatalf("%s after its refusal: %v %v", name, resp, err)
		}
	}
}

// TestASlowBodyIsCutWhileAnotherPrincipalProduces: authenticated clients
// that send their bodies a byte at a time lose their connections after the
// read timeout, nothing of them is logged, and another principal's frames
// are acknowledged throughout, gRPC and HTTP.
func TestASlowBodyIsCutWhileAnotherPrincipalProduces(t *testing.T) {
	const timeout = 500 * time.Millisecond
	n := startAbuseNode(t, Config{HTTPTimeouts: HTTPTimeouts{Read: timeout}}, "slow", "good")
	body := `{"topic":"slow","payload":"` + strings.Repeat("x", 100) + `"}`
	cut := make(chan time.Duration, 4)
	start := time.Now()
	for range cap(cut) {
		conn, err := net.Dial("tcp", n.s.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + n.tokens["slow"] +
			"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body[:10])); err != nil {
			t.Fatal(err)
		}
		go func() { // a byte every 100 ms: the whole body would take 10 s
			for i := 10; i < len(body); i++ {
				time.Sleep(100 * time.Millisecond)
				if _, err := conn.Write([]byte{body[i]}); err != nil {
					return
				}
			}
		}()
		go func() {
			r := bufio.NewReader(conn)
			_ = conn.SetReadDeadline(time.Now().Add(8 * time.Second))
			for { // an error answer, then the close
				if _, err := r.ReadByte(); err != nil {
					break
				}
			}
			cut <- time.Since(start)
		}()
	}
	auth := map[string]string{"Authorization": "Bearer " + n.tokens["good"]}
	for i := 0; len(cut) < cap(cut) && time.Since(start) < 8*time.Second; i++ {
		if code := n.produce(t, n.conn, "good"); code != "" {
			t.Fatalf("the good principal's frame %d over gRPC: %q", i, code)
		}
		if status, _, body := httpDo(t, "POST", "http://"+n.s.HTTPAddr()+"/v1/messages", `{"topic":"good","payload":1}`, auth); status != 200 {
			t.Fatalf("the good principal's message %d over HTTP: %d %s", i, status, body)
		}
	}
	for range cap(cut) {
		if took := <-cut; took > 3*time.Second {
			t.Fatalf("a slow client held its connection for %v with a %v read timeout", took, timeout)
		}
	}
	if logged := queryCount(t, n, "slow"); logged != 0 {
		t.Fatalf("%d messages of the slow clients were logged", logged)
	}
	if queryCount(t, n, "good") == 0 {
		t.Fatal("none of the good principal's HTTP messages were read back")
	}
}

// TestTheNodesConnectionsAreNotCounted: connections from an address a
// node registered in etcd (here the node's own, 127.0.0.1: a one-host
// cluster, or a client sharing a peer's address) are not counted against
// --max-connections-per-address, so they cannot exhaust the budget the
// nodes' own connections need; another address still is.
func TestTheNodesConnectionsAreNotCounted(t *testing.T) {
	const limit = 2
	n := startAbuseNode(t, Config{Limits: Limits{ConnectionsPerAddress: limit}}, "good")
	waitFor(t, 10*time.Second, "the node's registered address to be followed", func() bool {
		return n.s.auth.holdings.peers.has("127.0.0.1")
	})
	// Connections accepted before the address was followed (the test's
	// own, on a loaded machine) stay counted: only new ones must not be.
	heldBefore := n.s.auth.holdings.connections.Held("127.0.0.1")
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}, Timeout: 5 * time.Second}
	for range 3 * limit {
		c, err := dialer.Dial("tcp", n.s.GRPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if closedByServer(c, 200*time.Millisecond) {
			t.Fatal("a connection from the node's registered address was closed at accept")
		}
	}
	if held := n.s.auth.holdings.connections.Held("127.0.0.1"); held > heldBefore {
		t.Fatalf("%d connections counted for the node's registered address, %d before", held, heldBefore)
	}
	if code := n.produce(t, n.conn, "good"); code != "" {
		t.Fatalf("the node's own address past the limit: %q", code)
	}
	if n.s.auth.holdings.peers.has("127.0.0.2") {
		t.Fatal("an address no node registered is exempt")
	}
}
