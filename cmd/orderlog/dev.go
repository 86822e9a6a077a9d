package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"orderlog/internal/etcdserver"
)

// runDev starts every orderlog role in one process. Today that is the
// embedded etcd server; the sequencer, ingest and reader roles join it as
// they are built (see docs/design.md).
func runDev(args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	dataDir := fs.String("data", "./data", "directory for all state (etcd, WAL)")
	etcdAddr := fs.String("etcd-addr", "127.0.0.1:2379", "client address of the embedded etcd server")
	if err := fs.Parse(args); err != nil {
		return err
	}
	etcd, err := etcdserver.Start(etcdserver.Config{
		Dir:        filepath.Join(*dataDir, "etcd"),
		ClientAddr: *etcdAddr,
	})
	if err != nil {
		return err
	}
	defer etcd.Close()
	fmt.Printf("orderlog dev: embedded etcd at %s, data in %s\n", etcd.Endpoint(), *dataDir)
	fmt.Println("press Ctrl-C to stop")

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
	fmt.Println("orderlog dev: stopping")
	return nil
}
