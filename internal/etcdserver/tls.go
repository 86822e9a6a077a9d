package etcdserver

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"orderlog/internal/tlsconfig"
)

// peerHandshakeError makes a TLS connection to each other member's peer
// URL, as the member would, and returns the first refusal (a peer that
// does not trust this member's certificate, or a peer this member does
// not trust), or nil. etcd only logs it, and a member that could not
// join would otherwise fail with "could not retrieve cluster
// information".
func peerHandshakeError(cfg Config, source *tlsconfig.Source) error {
	members, _ := ParseInitialCluster(cfg.InitialCluster) // checked by Validate
	for _, name := range MemberNames(members) {
		if name == cfg.Name {
			continue
		}
		if err := handshake(members[name].Host, source.ClientConfig()); err != nil {
			return fmt.Errorf("peer %s at %s: %w", name, members[name].Host, err)
		}
	}
	return nil
}

// handshake connects to addr over TLS and waits briefly for a refusal:
// with TLS 1.3 a server's verdict on the client's certificate arrives
// after the client's side of the handshake is done.
func handshake(addr string, cfg *tls.Config) error {
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	conn, err := tls.DialWithDialer(dialer, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := conn.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return nil
}
