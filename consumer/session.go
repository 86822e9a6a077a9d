package consumer

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"time"

	"orderlog/internal/apierr"
	"orderlog/internal/partition"
	"orderlog/proto/orderlogpb"
	"orderlog/reader"
)

// Session timeouts: how long a member stays after its node stops renewing
// its lease.
const (
	DefaultSessionTimeout = 10 * time.Second
	MinSessionTimeout     = 2 * time.Second
	MaxSessionTimeout     = 300 * time.Second
)

// Start rules for a partition without a committed offset.
const (
	StartEarliest = "earliest"
	StartLatest   = "latest"
)

// session is one member's Consume stream.
type session struct {
	svc    *Service
	group  string
	member Member
	start  string
	send   func(*orderlogpb.ConsumeResponse) error
}

// validateJoin checks a JoinGroup and returns its session timeout.
func validateJoin(j *orderlogpb.JoinGroup) (time.Duration, error) {
	if j == nil {
		return 0, apierr.New(apierr.InvalidArgument, "a Consume stream starts with a JoinGroup")
	}
	if err := ValidateGroupName(j.Group); err != nil {
		return 0, err
	}
	if len(j.Topics) == 0 {
		return 0, apierr.New(apierr.InvalidArgument, "group %q: join for at least one topic", j.Group)
	}
	if len(j.ClientName) > 256 {
		return 0, apierr.New(apierr.InvalidArgument, "client name of %d bytes exceeds 256", len(j.ClientName))
	}
	switch j.Start {
	case "", StartEarliest, StartLatest:
	default:
		return 0, apierr.New(apierr.InvalidArgument, "start %q: use %q or %q", j.Start, StartEarliest, StartLatest)
	}
	timeout := DefaultSessionTimeout
	if j.SessionTimeoutMs != 0 {
		timeout = time.Duration(j.SessionTimeoutMs) * time.Millisecond
	}
	if timeout < MinSessionTimeout || timeout > MaxSessionTimeout {
		return 0, apierr.New(apierr.InvalidArgument, "session timeout %v is outside [%v, %v]", timeout, MinSessionTimeout, MaxSessionTimeout)
	}
	return timeout, nil
}

// newMemberID is the client's name with a random suffix: unique per join.
func newMemberID(clientName string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return cmp.Or(clientName, "member") + "-" + hex.EncodeToString(b[:])
}

// errLeft ends a stream whose member is no longer in the group.
var errLeft = errors.New("left the group")

// run serves the member until ctx ends or its membership does: it sends an
// Assignment for each generation that includes the member, then that
// generation's messages.
func (s *session) run(ctx context.Context) error {
	w, release := s.svc.coord.watch(s.group)
	defer release()
	s.svc.coord.reconcileNow(ctx, s.group)
	var (
		gen       uint64
		stop      context.CancelFunc = func() {}
		delivered                    = make(chan error, 1)
		wg        sync.WaitGroup
	)
	defer func() { stop(); wg.Wait() }()
	for {
		state, changed := w.current()
		if state != nil && state.Generation != gen {
			_, member := state.member(s.member.ID)
			switch {
			case member:
				stop()
				wg.Wait()
				gen = state.Generation
				dctx, cancel := context.WithCancel(ctx)
				stop = cancel
				wg.Add(1)
				go func(st *State) {
					defer wg.Done()
					if err := s.deliver(dctx, st); err != nil && dctx.Err() == nil {
						select {
						case delivered <- err:
						default:
						}
					}
				}(state)
			case gen != 0: // it was a member and is not: its lease ended
				return apierr.New(apierr.Unavailable, "member %s %v (its lease ended): join again", s.member.ID, errLeft)
			}
		}
		select {
		case <-changed:
		case err := <-delivered:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// deliver sends the member's assignment in state and then its partitions'
// messages, from each one's committed offset (or the start rule's), in
// global order, following C, until ctx ends.
func (s *session) deliver(ctx context.Context, state *State) error {
	parts := state.Assignment[s.member.ID]
	committed, err := s.svc.store.offsets(ctx, s.group)
	if err != nil {
		return err
	}
	r := s.svc.reader
	_, c := r.Commits().Committed()
	floor := r.ReadStart()
	starts := make(map[TopicPartition]uint64, len(parts))
	assignment := &orderlogpb.Assignment{MemberId: s.member.ID, Generation: state.Generation}
	sets := map[string][]uint32{}
	from := uint64(0)
	for i, tp := range parts {
		start := floor
		if rec, ok := committed[tp]; ok {
			start = max(rec.Offset, floor)
		} else if s.start == StartLatest {
			// pinned once: a later generation resumes here, not at its own C
			if start, err = s.svc.store.pinStart(ctx, s.group, tp, c); err != nil {
				return err
			}
		}
		starts[tp] = start
		if i == 0 || start < from {
			from = start
		}
		sets[tp.Topic] = append(sets[tp.Topic], tp.Partition)
		assignment.Partitions = append(assignment.Partitions, &orderlogpb.PartitionOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: start})
	}
	if err := s.send(&orderlogpb.ConsumeResponse{Response: &orderlogpb.ConsumeResponse_Assignment{Assignment: assignment}}); err != nil {
		return err
	}
	if len(parts) == 0 {
		<-ctx.Done()
		return nil
	}
	filter := reader.Filter{Assigned: map[string]*partition.Set{}}
	for topic, ps := range sets {
		filter.Assigned[topic] = partition.NewSet(state.Partitions[topic], ps...)
	}
	return r.Stream(ctx, from, 0, filter, true, func(page *orderlogpb.ReadResponse) error {
		batch := &orderlogpb.ConsumeBatch{Generation: state.Generation, Skipped: page.Skipped,
			NextOffset: page.NextOffset, Committed: page.Committed}
		for _, m := range page.Messages {
			topic := m.Message.GetTopic()
			p := partition.Of(m.Message.GetKey(), state.Partitions[topic])
			if m.Offset < starts[TopicPartition{topic, p}] {
				continue // below where this partition resumes
			}
			batch.Messages = append(batch.Messages, m)
			batch.Partitions = append(batch.Partitions, p)
		}
		if len(batch.Messages) == 0 && len(batch.Skipped) == 0 {
			return nil
		}
		return s.send(&orderlogpb.ConsumeResponse{Response: &orderlogpb.ConsumeResponse_Batch{Batch: batch}})
	})
}

// sortedTopics is the distinct topics, sorted.
func sortedTopics(topics []string) []string {
	out := slices.Clone(topics)
	slices.Sort(out)
	return slices.Compact(out)
}
