package auth

import (
	"context"
	"testing"
	"time"

	"orderlog/internal/etcdtest"
)

// TestTheStoreTurnsAuthOnAndRevokesAtOnce: with real etcd, the first
// administrator's token and ACL are one transaction; the watcher sees a
// token authenticate, then not after revocation; ACLs add and remove.
func TestTheStoreTurnsAuthOnAndRevokesAtOnce(t *testing.T) {
	cli := etcdtest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := NewStore(cli)
	w, err := NewWatcher(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	go w.Run(ctx)
	if w.Current().Enabled() {
		t.Fatal("auth is on with no token and no ACL")
	}
	rec, text, err := store.CreateToken(ctx, "root", "first admin", true)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ParseToken(text)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the watcher to see the token", func() bool {
		p, ok := w.Current().Authenticate(tok)
		return ok && p == "root" && w.Current().Enabled() && w.Current().Rules.Allows("root", Produce, "any")
	})
	if err := store.AddACL(ctx, ACL{Principal: "alice", Topic: "orders", Operation: Produce}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the ACL", func() bool { return w.Current().Rules.Allows("alice", Produce, "orders") })
	if ok, err := store.RemoveACL(ctx, ACL{Principal: "alice", Topic: "orders", Operation: Produce}); err != nil || !ok {
		t.Fatalf("RemoveACL: %v, %v", ok, err)
	}
	eventually(t, "the ACL's removal", func() bool { return !w.Current().Rules.Allows("alice", Produce, "orders") })
	if ok, err := store.RevokeToken(ctx, rec.ID); err != nil || !ok {
		t.Fatalf("RevokeToken: %v, %v", ok, err)
	}
	eventually(t, "the revocation", func() bool { _, ok := w.Current().Authenticate(tok); return !ok })
	if !w.Current().Enabled() {
		t.Fatal("auth went off while an ACL is left")
	}
	if _, _, err := store.CreateToken(ctx, "*", "", false); err == nil {
		t.Fatal("a token for principal * was made")
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
