package sequencer

import (
	"log/slog"
	"testing"
	"time"

	"orderlog/internal/event"
)

// testLogger logs to the test's output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// termEvents collects a node's LeaderElected and LeaderLost events, so that
// a test waits for a term to begin or end instead of polling Status.
type termEvents struct {
	elected, lost chan event.LeaderInfo
}

func newTermEvents() *termEvents {
	return &termEvents{elected: make(chan event.LeaderInfo, 64), lost: make(chan event.LeaderInfo, 64)}
}

func (e *termEvents) listener() event.Listener {
	return event.Listener{
		LeaderElected: func(i event.LeaderInfo) { offer(e.elected, i) },
		LeaderLost:    func(i event.LeaderInfo) { offer(e.lost, i) },
	}
}

// offer never blocks the node: a test that does not read the events of a
// node loses the ones beyond the buffer.
func offer(ch chan event.LeaderInfo, i event.LeaderInfo) {
	select {
	case ch <- i:
	default:
	}
}

// waitElected returns the first LeaderElected of an epoch ≥ epoch.
func (e *termEvents) waitElected(t *testing.T, epoch uint64) event.LeaderInfo {
	t.Helper()
	return waitTerm(t, e.elected, epoch, "elected")
}

// waitLost returns the first LeaderLost of an epoch ≥ epoch.
func (e *termEvents) waitLost(t *testing.T, epoch uint64) event.LeaderInfo {
	t.Helper()
	return waitTerm(t, e.lost, epoch, "lost")
}

func waitTerm(t *testing.T, ch chan event.LeaderInfo, epoch uint64, what string) event.LeaderInfo {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case i := <-ch:
			if i.Epoch >= epoch {
				return i
			}
		case <-timeout:
			t.Fatalf("no leadership %s at epoch ≥ %d within 30 s", what, epoch)
		}
	}
}
