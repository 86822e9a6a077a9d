package reader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"orderlog/internal/event"
	"orderlog/internal/grpcopt"
	pb "orderlog/proto/sequencerpb"
	"orderlog/sequencer"
)

var errNoLeader = errors.New("reader: no sequencer leader")

// FollowSilence is how long a commit-map stream may carry no frame before
// the reader drops it and looks for the leader again. The leader sends a
// frame at least every sequencer.CommitMapHeartbeat; a frozen or cut-off
// leader sends none, and without this its readers' C stood still for as
// long as the TCP connection lived (hours, with the OS's keepalive).
var FollowSilence = 5 * sequencer.CommitMapHeartbeat

var errSilentLeader = errors.New("reader: the sequencer leader's commit-map stream went silent")

// FollowConfig configures Follow.
type FollowConfig struct {
	// Logger logs failures of the commit-map stream, each new kind once
	// (not the ones expected while a leader is elected); nil discards them.
	Logger *slog.Logger
	// Events is told when the reader loses the commit map (and at the
	// start) and when it is in step again.
	Events event.Listener
	// CheckpointRefresh spaces the loads of a newer checkpoint that a full
	// commit-map window asks for. Default 10 s.
	CheckpointRefresh time.Duration
	// Credentials are how the follower dials the leader; nil: plaintext.
	Credentials credentials.TransportCredentials
}

// Follow keeps commits up to date from the sequencer leader's commit-map
// stream until ctx ends: it finds the leader in etcd, subscribes from the
// map's C, applies every record, and reconnects (to whichever node leads)
// after any failure.
func Follow(ctx context.Context, cli *clientv3.Client, commits *CommitMap, cfg FollowConfig) {
	logger := event.OrDiscard(cfg.Logger)
	cfg.Events.EnsureDefaults()
	if cfg.CheckpointRefresh <= 0 {
		cfg.CheckpointRefresh = 10 * time.Second
	}
	f := &follower{cli: cli, commits: commits, events: cfg.Events, since: time.Now(), logger: logger, root: ctx,
		refreshEvery: cfg.CheckpointRefresh, dial: grpcopt.DialOptionsWith(cfg.Credentials)}
	defer f.refreshes.Wait()
	epoch, committed := commits.Committed()
	f.events.ReaderCatchingUp(event.ReaderInfo{Epoch: epoch, Committed: committed})
	lastLogged := ""
	for ctx.Err() == nil {
		err := f.followOnce(ctx)
		if f.inStep && ctx.Err() == nil {
			f.inStep, f.since = false, time.Now()
			epoch, committed := commits.Committed()
			f.events.ReaderCatchingUp(event.ReaderInfo{Epoch: epoch, Committed: committed, Err: err})
		}
		// Log each new kind of failure once: during a failover the same one
		// repeats every retry until the new leader serves.
		if err != nil && ctx.Err() == nil && err.Error() != lastLogged && !electing(err) {
			logger.Warn("reader: commit-map stream failed; retrying", "err", err)
			lastLogged = err.Error()
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// follower is Follow's state across streams.
type follower struct {
	cli     *clientv3.Client
	commits *CommitMap
	events  event.Listener
	// inStep is set once a stream's first watermark is applied, and cleared
	// when that stream ends; since is when it was last cleared.
	inStep bool
	since  time.Time
	logger *slog.Logger
	root   context.Context // Follow's
	// refreshing is set while a newer checkpoint is loaded to shrink the
	// window; lastRefresh is when the last load started.
	refreshes    sync.WaitGroup
	refreshing   atomic.Bool
	lastRefresh  time.Time
	refreshEvery time.Duration
	dial         []grpc.DialOption
}

// bootstrap loads the newest checkpoint into the map: the leader no
// longer retains the records from the map's C on (OUT_OF_RANGE), and the
// checkpoint's end is at or above the oldest it retains.
func (f *follower) bootstrap(ctx context.Context) error {
	entries := f.commits.entrySource()
	if entries == nil {
		return fmt.Errorf("%w: no entry source to read it with yet", ErrNoCheckpoint)
	}
	cp, err := LoadCheckpoint(ctx, f.cli, entries, f.commits.cfg.CachedChunks)
	if err != nil {
		return err
	}
	if cp == nil {
		return ErrNoCheckpoint
	}
	return f.commits.InstallCheckpoint(cp)
}

// maybeRefresh loads a newer checkpoint in the background when the window
// is full, at most every refreshEvery.
func (f *follower) maybeRefresh() {
	if !f.commits.wantsCheckpoint() || time.Since(f.lastRefresh) < f.refreshEvery || !f.refreshing.CompareAndSwap(false, true) {
		return
	}
	f.lastRefresh = time.Now()
	f.refreshes.Go(func() {
		defer f.refreshing.Store(false)
		if err := f.bootstrap(f.root); err != nil && f.root.Err() == nil {
			f.logger.Info("reader: could not load a newer checkpoint to shrink the commit map's window", "err", err)
		}
	})
}

func (f *follower) followOnce(ctx context.Context) error {
	lookup, cancel := context.WithTimeout(ctx, 5*time.Second)
	addr, err := sequencer.LeaderAddress(lookup, f.cli)
	cancel()
	if err != nil {
		return err
	}
	if addr == "" {
		return errNoLeader
	}
	conn, err := grpc.NewClient(addr, f.dial...)
	if err != nil {
		return err
	}
	defer conn.Close()
	for {
		err := f.subscribe(ctx, pb.NewSequencerClient(conn), addr)
		if !errors.Is(err, errBootstrapped) {
			return err
		}
		// Subscribe again at once, from the checkpoint's end: a fresh
		// reader's time to ready is this round trip, not a retry's pause.
	}
}

// errBootstrapped ends a subscription whose first answer was OUT_OF_RANGE
// once the newest checkpoint is installed.
var errBootstrapped = errors.New("reader: started from the newest checkpoint")

// subscribe applies one commit-map stream from the map's C until it fails.
func (f *follower) subscribe(ctx context.Context, seq pb.SequencerClient, addr string) error {
	_, from := f.commits.Committed()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var silent atomic.Bool
	watchdog := time.AfterFunc(FollowSilence, func() { silent.Store(true); stop() })
	defer watchdog.Stop()
	stream, err := seq.CommitMap(ctx, &pb.CommitMapRequest{FromOffset: from})
	if err != nil {
		return err
	}
	for {
		frame, err := stream.Recv()
		if silent.Load() {
			return errSilentLeader
		}
		if status.Code(err) == codes.OutOfRange {
			// Below the records the leader retains: start from the
			// newest checkpoint, then subscribe from its end.
			if berr := f.bootstrap(ctx); berr != nil {
				return fmt.Errorf("%w (after %v)", berr, err)
			}
			if _, after := f.commits.Committed(); after <= from {
				// The newest checkpoint ends below what the leader
				// retains (its checkpoints are failing): wait for a newer
				// one at the retry's pace, not in a tight loop.
				return fmt.Errorf("%w: the newest checkpoint does not reach the leader's retained records (after %v)", ErrNoCheckpoint, err)
			}
			return errBootstrapped
		}
		if err != nil {
			return err
		}
		watchdog.Reset(FollowSilence)
		if err := applyFrame(f.commits, frame); err != nil {
			return err
		}
		f.maybeRefresh()
		if !f.inStep {
			f.noteInStep(addr, int64(frame.Epoch))
		}
	}
}

// noteInStep reports the reader in step once the map holds a watermark of
// the stream's epoch.
func (f *follower) noteInStep(leader string, streamEpoch int64) {
	epoch, committed := f.commits.Committed()
	if epoch == 0 || epoch != streamEpoch {
		return
	}
	f.inStep = true
	f.events.ReaderInStep(event.ReaderInfo{Leader: leader, Epoch: epoch, Committed: committed, Waited: time.Since(f.since)})
}

// applyFrame applies one frame's records under the frame's (leader) epoch.
func applyFrame(commits *CommitMap, frame *pb.CommitMapFrame) error {
	epoch := int64(frame.Epoch)
	for _, r := range frame.Records {
		var err error
		switch r.Kind {
		case pb.RecordKind_WRITTEN:
			err = commits.Resolve(epoch, Segment{First: r.Range.GetFirst(), End: r.Range.GetEnd(), Ledger: r.LedgerId, Entry: r.EntryId})
		case pb.RecordKind_HOLE:
			err = commits.Resolve(epoch, Segment{First: r.Range.GetFirst(), End: r.Range.GetEnd(), Hole: true})
		case pb.RecordKind_WATERMARK:
			err = commits.Advance(epoch, r.Watermark)
		}
		if err != nil {
			return fmt.Errorf("record %v: %w", r, err)
		}
	}
	return nil
}

// electing reports the failures expected while a sequencer leader is being
// elected or is taking over; they are retried without a word.
func electing(err error) bool {
	return errors.Is(err, errNoLeader) || status.Code(err) == codes.Unavailable
}
