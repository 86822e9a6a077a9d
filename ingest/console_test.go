package ingest

import (
	"context"
	"testing"
	"time"

	"orderlog/internal/keys"
)

// TestListProducersPagesTheRecordsAPrincipalMaySee: records come in id
// order with their epoch, owner (and its address while it is live) and
// principal; a filter that keeps one principal's records still pages
// through every record read, and the cursor picks up after the last
// record looked at, also when the scan bound ends a page early.
func TestListProducersPagesTheRecordsAPrincipalMaySee(t *testing.T) {
	cli := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, keys.Ingest("node-a-1"), "10.0.0.1:7070"); err != nil {
		t.Fatal(err)
	}
	live(t, cli, "node-b-2")
	for _, p := range []struct{ name, owner, principal string }{
		{"p1", "node-a-1", "alice"}, {"p2", "node-a-1", "bob"}, {"p3", "node-b-2", "alice"},
		{"p4", "node-a-1", "bob"}, {"p5", "node-a-1", "alice"}, {"orderlog.idempotency-0", "node-a-1", ""},
	} {
		if _, _, err := registerProducerAs(ctx, cli, p.name, p.owner, p.principal); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := registerProducerAs(ctx, cli, "p1", "node-a-1", "alice"); err != nil { // epoch 2
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, keys.Ingest("node-b-2")); err != nil { // p3's owner is gone
		t.Fatal(err)
	}

	all, next, err := ListProducers(ctx, cli, 0, 10, 100, nil)
	if err != nil || next != 0 || len(all) != 6 {
		t.Fatalf("all: %+v next %d %v, want 6 records and no more", all, next, err)
	}
	if p := all[0]; p.ID != 1 || p.Name != "p1" || p.Epoch != 2 || p.Owner != "node-a-1" || p.OwnerAddress != "10.0.0.1:7070" || !p.OwnerLive || p.Principal != "alice" || p.Bucket {
		t.Errorf("p1: %+v", p)
	}
	if p := all[2]; p.Name != "p3" || p.OwnerAddress != "" || p.OwnerLive {
		t.Errorf("p3, whose owner is gone: %+v", p)
	}
	if !all[5].Bucket {
		t.Errorf("the idempotency bucket is not marked: %+v", all[5])
	}

	alice := func(r ProducerRecord) bool { return r.Principal == "alice" }
	type page struct {
		after       uint64
		limit, scan int
		names       []string
		next        uint64
	}
	for _, c := range []page{
		{0, 2, 100, []string{"p1", "p3"}, 4}, // p4 was read, and left out
		{4, 2, 100, []string{"p5"}, 0},
		{0, 10, 2, []string{"p1"}, 2}, // the scan ends the page after p2
		{2, 10, 2, []string{"p3"}, 4},
		{4, 10, 2, []string{"p5"}, 0}, // p5 and the bucket were the last two
		{6, 10, 2, nil, 0},
	} {
		got, next, err := ListProducers(ctx, cli, c.after, c.limit, c.scan, alice)
		var names []string
		for _, r := range got {
			names = append(names, r.Name)
		}
		if err != nil || next != c.next || len(names) != len(c.names) || (len(names) > 0 && names[len(names)-1] != c.names[len(c.names)-1]) ||
			(len(names) > 0 && names[0] != c.names[0]) {
			t.Errorf("after %d limit %d scan %d: %v next %d %v; want %v next %d", c.after, c.limit, c.scan, names, next, err, c.names, c.next)
		}
	}
}
