package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"orderlog/internal/node"
	"orderlog/internal/tlsconfig"
)

// tlsFlags are the TLS flags of the commands that run a node (node, dev
// and the role commands).
type tlsFlags struct{ files tlsconfig.Config }

func (f *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.files.CertFile, "tls-cert", "", "PEM certificate of this node: serves gRPC, HTTP and etcd over TLS, and presents it to other nodes and etcd "+
		"(needs --tls-key and --tls-ca; it must name every address the node is reached at, and allow server and client use)")
	fs.StringVar(&f.files.KeyFile, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&f.files.CAFile, "tls-ca", "", "PEM CA certificate(s): other nodes' and etcd's certificates, and any client certificate offered, must chain to it")
}

// apply sets the node's TLS files; they are read again on SIGHUP and
// when they change.
func (f *tlsFlags) apply(cfg *node.Config) error {
	if err := f.files.ValidateServer(); err != nil {
		return errors.New("--tls-cert, --tls-key and --tls-ca go together")
	}
	cfg.TLS.Config = f.files
	return nil
}

// scheme is the URL scheme of the node's HTTP and etcd URLs.
func scheme(cfg node.Config) string {
	if cfg.TLS.Enabled() {
		return "https"
	}
	return "http"
}

// reloadOnSIGHUP reloads the server's TLS files at each SIGHUP until ctx
// ends. Without TLS, SIGHUP keeps its default (the process ends).
func reloadOnSIGHUP(ctx context.Context, server *node.Server, cfg node.Config) {
	if !cfg.TLS.Enabled() {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = server.ReloadTLS() // it logs the outcome
			}
		}
	}()
}

// devTLSHosts are the names the dev node certificate carries: loopback,
// and the hosts of the listen addresses (this machine's name for an
// address on every interface).
func devTLSHosts(addrs ...string) []string {
	hosts := []string{"127.0.0.1", "::1", "localhost"}
	for _, addr := range addrs {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			continue
		}
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			host, _ = os.Hostname()
		}
		if host != "" && !slices.Contains(hosts, host) {
			hosts = append(hosts, host)
		}
	}
	return hosts
}

// devTLS makes or reuses the dev CA and certificates under dir and says
// which files it wrote.
func devTLS(dir string, addrs ...string) (tlsconfig.Dev, error) {
	d, created, err := tlsconfig.EnsureDev(dir, devTLSHosts(addrs...), time.Now())
	if err != nil {
		return d, fmt.Errorf("dev certificates: %w", err)
	}
	for _, file := range created {
		fmt.Printf("orderlog dev: wrote %s\n", file)
	}
	return d, nil
}
