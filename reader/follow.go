package reader

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// Follow keeps commits up to date from the sequencer leader's commit-map
// stream until ctx ends: it finds the leader in etcd, subscribes from the
// map's C, applies every record, and reconnects (to whichever node leads)
// after any failure. logf reports failures; nil is silent.
func Follow(ctx context.Context, cli *clientv3.Client, commits *CommitMap, logf func(string, ...any)) {
	lastLogged := ""
	for ctx.Err() == nil {
		err := followOnce(ctx, cli, commits)
		// Log each new kind of failure once: during a failover the same one
		// repeats every retry until the new leader serves.
		if err != nil && ctx.Err() == nil && logf != nil && err.Error() != lastLogged && !electing(err) {
			logf("reader: commit map: %v (retrying)", err)
			lastLogged = err.Error()
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func followOnce(ctx context.Context, cli *clientv3.Client, commits *CommitMap) error {
	lookup, cancel := context.WithTimeout(ctx, 5*time.Second)
	addr, err := sequencer.LeaderAddress(lookup, cli)
	cancel()
	if err != nil {
		return err
	}
	if addr == "" {
		return errNoLeader
	}
	conn, err := grpc.NewClient(addr, grpcopt.DialOptions()...)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, from := commits.Committed()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var silent atomic.Bool
	watchdog := time.AfterFunc(FollowSilence, func() { silent.Store(true); stop() })
	defer watchdog.Stop()
	stream, err := pb.NewSequencerClient(conn).CommitMap(ctx, &pb.CommitMapRequest{FromOffset: from})
	if err != nil {
		return err
	}
	for {
		frame, err := stream.Recv()
		if silent.Load() {
			return errSilentLeader
		}
		if err != nil {
			return err
		}
		watchdog.Reset(FollowSilence)
		if err := applyFrame(commits, frame); err != nil {
			return err
		}
	}
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
