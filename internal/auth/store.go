package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Keys under which credentials live in etcd. Whoever can write them can
// grant anything: etcd's own access is part of the threat model
// (docs/security.md).
const (
	authPrefix   = "orderlog/auth/"
	tokensPrefix = authPrefix + "tokens/"
	aclsPrefix   = authPrefix + "acls/"
	quotasPrefix = authPrefix + "quotas/"
)

// TokenRecord is a token's record: the principal it authenticates and the
// hash of its secret.
type TokenRecord struct {
	ID          string `json:"id"`
	Principal   string `json:"principal"`
	Hash        string `json:"hash"`
	CreatedUS   int64  `json:"created_us"`
	Description string `json:"description,omitempty"`
}

// aclKey is an entry's key: the same entry added twice is one key.
func aclKey(a ACL) string {
	sum := sha256.Sum256([]byte(a.Principal + "\x00" + a.Topic + "\x00" + string(a.Operation)))
	return aclsPrefix + hex.EncodeToString(sum[:12])
}

// Store reads and writes credentials in etcd.
type Store struct{ etcd *clientv3.Client }

// NewStore returns a Store.
func NewStore(etcd *clientv3.Client) *Store { return &Store{etcd: etcd} }

// CreateToken stores a new token for principal and returns its string,
// which is shown once and never stored. With admin, the principal also
// gets admin on every topic in the same transaction: the way to make the
// first administrator (the first token or ACL turns authentication on).
func (s *Store) CreateToken(ctx context.Context, principal, description string, admin bool) (TokenRecord, string, error) {
	if err := (ACL{Principal: principal, Topic: "*", Operation: Admin}).Validate(); err != nil || principal == "*" {
		return TokenRecord{}, "", fmt.Errorf("principal %q: a name of 1-%d bytes, not '*'", principal, MaxPatternBytes)
	}
	tok, text := NewToken()
	rec := TokenRecord{ID: tok.ID, Principal: principal, Hash: tok.Hash(), CreatedUS: time.Now().UnixMicro(), Description: description}
	value, _ := json.Marshal(rec)
	ops := []clientv3.Op{clientv3.OpPut(tokensPrefix+rec.ID, string(value))}
	if admin {
		a := ACL{Principal: principal, Topic: "*", Operation: Admin}
		acl, _ := json.Marshal(a)
		ops = append(ops, clientv3.OpPut(aclKey(a), string(acl)))
	}
	resp, err := s.etcd.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(tokensPrefix+rec.ID), "=", 0)).Then(ops...).Commit()
	if err != nil {
		return TokenRecord{}, "", err
	}
	if !resp.Succeeded {
		return TokenRecord{}, "", fmt.Errorf("token id %s exists: try again", rec.ID)
	}
	return rec, text, nil
}

// RevokeToken deletes a token's record; false if there was none.
func (s *Store) RevokeToken(ctx context.Context, id string) (bool, error) {
	resp, err := s.etcd.Delete(ctx, tokensPrefix+id)
	if err != nil {
		return false, err
	}
	return resp.Deleted > 0, nil
}

// AddACL stores an entry (adding it twice changes nothing).
func (s *Store) AddACL(ctx context.Context, a ACL) error {
	if err := a.Validate(); err != nil {
		return err
	}
	value, _ := json.Marshal(a)
	_, err := s.etcd.Put(ctx, aclKey(a), string(value))
	return err
}

// RemoveACL deletes an entry; false if there was none.
func (s *Store) RemoveACL(ctx context.Context, a ACL) (bool, error) {
	resp, err := s.etcd.Delete(ctx, aclKey(a))
	if err != nil {
		return false, err
	}
	return resp.Deleted > 0, nil
}

// SetQuota stores principal's quota ("*": everyone without one of their
// own); a zero Quota removes it.
func (s *Store) SetQuota(ctx context.Context, principal string, q Quota) error {
	if principal == "" || len(principal) > MaxPatternBytes || q.ProduceBytesPerSec < 0 || q.ReadBytesPerSec < 0 {
		return fmt.Errorf("a quota needs a principal of 1-%d bytes and rates of at least 0", MaxPatternBytes)
	}
	if q == (Quota{}) {
		_, err := s.etcd.Delete(ctx, quotasPrefix+principal)
		return err
	}
	value, _ := json.Marshal(q)
	_, err := s.etcd.Put(ctx, quotasPrefix+principal, string(value))
	return err
}

// State is every token record and ACL entry at one etcd revision.
type State struct {
	Tokens   map[string]TokenRecord // by id
	Rules    Rules
	Quotas   map[string]Quota // by principal ("*": everyone without one)
	Revision int64
}

// Enabled reports whether authentication and authorization apply: once
// any token or ACL exists.
func (st *State) Enabled() bool { return len(st.Tokens) > 0 || len(st.Rules.entries) > 0 }

// Authenticate returns the principal a token string names, if its record
// exists and its secret matches.
func (st *State) Authenticate(tok Token) (string, bool) {
	rec, ok := st.Tokens[tok.ID]
	if !ok {
		tok.Matches(strings.Repeat("0", 64)) // the same work as a known id: timing tells nothing
		return "", false
	}
	if !tok.Matches(rec.Hash) {
		return "", false
	}
	return rec.Principal, true
}

// Load reads the whole state.
func (s *Store) Load(ctx context.Context) (*State, error) {
	resp, err := s.etcd.Get(ctx, authPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	st := &State{Tokens: map[string]TokenRecord{}, Quotas: map[string]Quota{}, Revision: resp.Header.Revision}
	var entries []ACL
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		switch {
		case strings.HasPrefix(key, tokensPrefix):
			var rec TokenRecord
			if err := json.Unmarshal(kv.Value, &rec); err != nil {
				return nil, fmt.Errorf("token record %s: %w", key, err)
			}
			st.Tokens[rec.ID] = rec
		case strings.HasPrefix(key, quotasPrefix):
			var q Quota
			if err := json.Unmarshal(kv.Value, &q); err != nil {
				return nil, fmt.Errorf("quota %s: %w", key, err)
			}
			st.Quotas[strings.TrimPrefix(key, quotasPrefix)] = q
		case strings.HasPrefix(key, aclsPrefix):
			var a ACL
			if err := json.Unmarshal(kv.Value, &a); err != nil {
				return nil, fmt.Errorf("ACL %s: %w", key, err)
			}
			entries = append(entries, a)
		}
	}
	slices.SortFunc(entries, func(a, b ACL) int {
		return strings.Compare(a.Principal+"\x00"+a.Topic+"\x00"+string(a.Operation), b.Principal+"\x00"+b.Topic+"\x00"+string(b.Operation))
	})
	st.Rules = NewRules(entries)
	return st, nil
}

// Watcher keeps the current State in memory, following etcd.
type Watcher struct {
	store   *Store
	current atomic.Pointer[State]
}

// NewWatcher loads the state once and returns a Watcher; Run follows it.
func NewWatcher(ctx context.Context, store *Store) (*Watcher, error) {
	st, err := store.Load(ctx)
	if err != nil {
		return nil, err
	}
	w := &Watcher{store: store}
	w.current.Store(st)
	return w, nil
}

// Current is the latest state loaded.
func (w *Watcher) Current() *State { return w.current.Load() }

// Run reloads the state on every change under the auth prefix, and every
// reloadEvery besides, until ctx ends. A reload that fails is retried
// until it succeeds: a revocation must not be lost to one failed read.
func (w *Watcher) Run(ctx context.Context) {
	for ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, reloadEvery)
		rev := w.Current().Revision
		for resp := range w.store.etcd.Watch(clientv3.WithRequireLeader(wctx), authPrefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if resp.Err() != nil {
				break
			}
			w.reload(ctx)
		}
		cancel()
		w.reload(ctx)
	}
}

// reloadEvery bounds how stale a node's credentials can be if a watch
// event is lost.
const reloadEvery = 30 * time.Second

// reload loads the state until it succeeds or ctx ends.
func (w *Watcher) reload(ctx context.Context) {
	for pause := 50 * time.Millisecond; ctx.Err() == nil; pause = min(2*pause, 2*time.Second) {
		if st, err := w.store.Load(ctx); err == nil {
			w.current.Store(st)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}
