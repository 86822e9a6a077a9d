package node

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestASlowBodyIsCutOff: a client that sends its headers and then its body
// a byte at a time, too slowly, loses its connection after the read
// timeout, and nothing of it is logged; another client's request meanwhile
// is served at once.
func TestASlowBodyIsCutOff(t *testing.T) {
	s := startServerWith(t, Config{DataDir: t.TempDir(), HTTPTimeouts: HTTPTimeouts{Read: 500 * time.Millisecond}})
	defer s.Close()
	conn, err := net.Dial("tcp", s.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"topic":"slow","payload":"` + strings.Repeat("x", 100) + `"}`
	if _, err := conn.Write([]byte("POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body[:10])); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cut := make(chan time.Duration, 1)
	go func() {
		for i := 10; i < len(body); i++ {
			time.Sleep(100 * time.Millisecond)
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				break
			}
		}
	}()
	go func() {
		r := bufio.NewReader(conn)
		_, _ = r.ReadString('\n') // an error answer or the close, whichever comes
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			if _, err := r.ReadByte(); err != nil {
				break
			}
		}
		cut <- time.Since(start)
	}()
	if code, _, _ := httpDo(t, "POST", "http://"+s.HTTPAddr()+"/v1/messages", `{"topic":"fast","payload":1}`, nil); code != 200 {
		t.Fatalf("another client's produce: %d", code)
	}
	select {
	case took := <-cut:
		if took > 3*time.Second {
			t.Fatalf("the slow client held its connection for %v with a 500ms read timeout", took)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the slow client still holds its connection after 8 s")
	}
	c := dial(t, s)
	msgs, _ := readAll(t, c)
	for _, m := range msgs {
		if m.Message.Topic == "slow" {
			t.Fatal("the slow request was logged")
		}
	}
}
