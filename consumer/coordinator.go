package consumer

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// recheckEvery bounds how long a missed watch event can leave a group
// unreconciled.
const recheckEvery = 5 * time.Second

// Coordinator keeps, for every group with a member on this node, a watch
// of the group's keys: when the members change it writes the next
// generation (Store.reconcile) and tells the node's sessions.
type Coordinator struct {
	store  *Store
	logger *slog.Logger

	mu     sync.Mutex
	groups map[string]*groupWatch
}

// NewCoordinator returns a Coordinator over store.
func NewCoordinator(store *Store, logger *slog.Logger) *Coordinator {
	if logger == nil {
		logger = slog.Default()
	}
	return &Coordinator{store: store, logger: logger, groups: map[string]*groupWatch{}}
}

// groupWatch is one group's watch and its latest state.
type groupWatch struct {
	refs   int
	cancel context.CancelFunc

	mu      sync.Mutex
	state   *State
	changed chan struct{} // closed when state is replaced
}

// current is the latest state (nil before the first) and a channel closed
// when it is replaced.
func (w *groupWatch) current() (*State, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state, w.changed
}

func (w *groupWatch) publish(s *State) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != nil && s.Generation <= w.state.Generation {
		return
	}
	w.state = s
	close(w.changed)
	w.changed = make(chan struct{})
}

// watch returns the group's watch, started if this is its first session;
// release ends it after the last.
func (c *Coordinator) watch(group string) (w *groupWatch, release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.groups[group]
	if !ok {
		ctx, cancel := context.WithCancel(context.Background())
		w = &groupWatch{cancel: cancel, changed: make(chan struct{})}
		c.groups[group] = w
		go c.run(ctx, group, w)
	}
	w.refs++
	return w, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if w.refs--; w.refs == 0 {
			w.cancel()
			delete(c.groups, group)
		}
	}
}

// Reconcile asks the group's watch, if this node has one, to look at the
// members now (after a member joined here).
func (c *Coordinator) reconcileNow(ctx context.Context, group string) {
	state, _, err := c.store.reconcile(ctx, group)
	if err != nil {
		c.logger.Warn("consumer group: reconcile", "group", group, "err", err)
		return
	}
	c.mu.Lock()
	w := c.groups[group]
	c.mu.Unlock()
	if w != nil {
		w.publish(state)
	}
}

// run reconciles the group whenever its members or state change, and every
// recheckEvery, until ctx ends.
func (c *Coordinator) run(ctx context.Context, group string, w *groupWatch) {
	for ctx.Err() == nil {
		state, rev, err := c.store.reconcile(ctx, group)
		if err != nil {
			if ctx.Err() == nil {
				c.logger.Warn("consumer group: reconcile", "group", group, "err", err)
			}
			sleep(ctx, time.Second)
			continue
		}
		if prev, _ := w.current(); prev == nil || prev.Generation != state.Generation {
			c.logger.Info("consumer group generation", "group", group, "generation", state.Generation,
				"members", len(state.Members))
		}
		w.publish(state)
		c.waitForChange(ctx, group, rev)
	}
}

// waitForChange returns after a member or state event past rev, after
// recheckEvery, or when the watch fails.
func (c *Coordinator) waitForChange(ctx context.Context, group string, rev int64) {
	wctx, cancel := context.WithTimeout(ctx, recheckEvery)
	defer cancel()
	events := c.store.etcd.Watch(clientv3.WithRequireLeader(wctx), groupPrefix(group), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	offsets := offsetsPrefix(group)
	for resp := range events {
		if resp.Err() != nil {
			return
		}
		for _, ev := range resp.Events {
			if !strings.HasPrefix(string(ev.Kv.Key), offsets) {
				return
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
