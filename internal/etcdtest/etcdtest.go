// Package etcdtest is test support: a real embedded etcd server for one
// test, with its client closed before the server (etcdserver's rule).
// Only _test.go files import it.
package etcdtest

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"orderlog/internal/etcdserver"
)

// Client starts an embedded etcd server in a temporary directory and
// returns a client of it; both are closed when the test ends.
func Client(t testing.TB) *clientv3.Client {
	t.Helper()
	srv, err := etcdserver.Start(etcdserver.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := srv.NewClient()
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cli.Close()
		srv.Close()
	})
	return cli
}
