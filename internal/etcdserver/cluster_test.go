package etcdserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// startMembers starts the members of cfgs concurrently (each waits for a
// quorum) and returns them in order.
func startMembers(t *testing.T, cfgs []Config) []*Server {
	t.Helper()
	type result struct {
		i   int
		srv *Server
		err error
	}
	results := make(chan result, len(cfgs))
	for i, cfg := range cfgs {
		go func() {
			srv, err := Start(cfg)
			results <- result{i, srv, err}
		}()
	}
	out := make([]*Server, len(cfgs))
	for range cfgs {
		r := <-results
		if r.err != nil {
			t.Fatalf("member %d: %v", r.i, r.err)
		}
		out[r.i] = r.srv
	}
	return out
}

func TestThreeMembersFormOneClusterAndAKilledMemberRejoins(t *testing.T) {
	var cluster []string
	cfgs := make([]Config, 3)
	for i := range cfgs {
		peer := fmt.Sprintf("127.0.0.1:%d", mustFreePort(t))
		name := fmt.Sprintf("n%d", i+1)
		cluster = append(cluster, name+"=http://"+peer)
		cfgs[i] = Config{Dir: t.TempDir(), Name: name, ReadyTimeout: time.Minute}
	}
	for i := range cfgs {
		cfgs[i].InitialCluster = strings.Join(cluster, ",")
	}
	members := startMembers(t, cfgs)
	defer func() {
		for _, m := range members {
			if m != nil {
				m.Close()
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	put(ctx, t, members[0], "k", "v1")
	if got := get(ctx, t, members[2], "k"); got != "v1" {
		t.Fatalf("member 3 reads %q, want v1", got)
	}

	members[1].Close() // two of three keep a quorum
	members[1] = nil
	put(ctx, t, members[2], "k", "v2")

	if !HasMember(cfgs[1].Dir) {
		t.Fatal("the stopped member's directory holds no member data")
	}
	restarted, err := Start(cfgs[1]) // rejoins with its data dir
	if err != nil {
		t.Fatal(err)
	}
	members[1] = restarted
	if got := get(ctx, t, restarted, "k"); got != "v2" {
		t.Fatalf("the rejoined member reads %q, want v2", got)
	}
}

func TestValidateRejectsAMemberOutsideItsCluster(t *testing.T) {
	for name, cfg := range map[string]Config{
		"not_listed":  {Dir: "d", Name: "n4", InitialCluster: "n1=http://127.0.0.1:1,n2=http://127.0.0.1:2"},
		"no_url":      {Dir: "d", Name: "n1", InitialCluster: "n1"},
		"no_port":     {Dir: "d", Name: "n1", InitialCluster: "n1=http://127.0.0.1"},
		"duplicate":   {Dir: "d", Name: "n1", InitialCluster: "n1=http://127.0.0.1:1,n1=http://127.0.0.1:2"},
		"bad_state":   {Dir: "d", ClusterState: "joining"},
		"no_data_dir": {},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, cfg)
		}
	}
	cfg := Config{Dir: "d", Name: "n2", InitialCluster: "n1=http://127.0.0.1:1,n2=http://127.0.0.1:2,n3=http://127.0.0.1:3"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.PeerAddr != "127.0.0.1:2" || cfg.Members() != 3 {
		t.Fatalf("peer %q, members %d: want 127.0.0.1:2 and 3", cfg.PeerAddr, cfg.Members())
	}
}

func mustFreePort(t *testing.T) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func put(ctx context.Context, t *testing.T, srv *Server, k, v string) {
	t.Helper()
	c, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, k, v); err != nil {
		t.Fatal(err)
	}
}

func get(ctx context.Context, t *testing.T, srv *Server, k string) string {
	t.Helper()
	c, err := srv.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}
