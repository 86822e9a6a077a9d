package etcdserver

import (
	"context"
	"testing"
	"time"
)

func TestStartServesClientsAndKeepsDataAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	srv, err := Start(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	c, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	srv.Close()

	srv, err = Start(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err = srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("after restart got %v, want k=v", resp.Kvs)
	}
}
