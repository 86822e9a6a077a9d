package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/credentials"

	"orderlog/ingest/pipeline"
	"orderlog/internal/event"
	"orderlog/proto/orderlogpb"
	"orderlog/schema"
	"orderlog/sequencer"
)

// AckMode says when a producer is told its message is logged.
type AckMode string

const (
	// AckQuorum (default): after the entry is fsynced on an ack quorum of
	// the ledger's stores. The contract's durability guarantee.
	AckQuorum AckMode = "quorum"
	// AckReplicated is the specification's name of AckQuorum (Validate
	// turns it into AckQuorum).
	AckReplicated AckMode = "replicated"
	// AckLeader: after this node's own store fsynced it, before the quorum.
	// A request may ask for either mode (ProduceRequest.ack, HTTP ?ack=).
	// Weaker (at most once for such a message): if this node dies first the
	// message can be lost, its acknowledged offset a hole; if its ledger is
	// closed below it the message is logged again at a later offset. With
	// W = A = 1 it is AckQuorum. A ledger whose ensemble lacks LocalStore is
	// acknowledged at the quorum.
	AckLeader AckMode = "leader"
)

// Defaults of the node's timeouts (docs/operations.md lists them with the
// flags that set them).
const (
	DefaultLeaseTTL           = 5 * time.Second
	DefaultGrantStreamSilence = 2 * time.Second
	DefaultUnreachableAfter   = 2 * time.Second
	DefaultRollBytes          = 1 << 30
	DefaultRollAge            = time.Hour
	DefaultProducerExpiry     = 7 * 24 * time.Hour
	// DefaultProducerActiveWindow: see Config.ProducerActiveWindow.
	DefaultProducerActiveWindow = 5 * time.Minute
	// minGrantStreamSilence leaves room for a few lost or late heartbeats.
	minGrantStreamSilence = 4 * sequencer.GrantStreamHeartbeat
)

// Config configures an ingest node.
type Config struct {
	// NodeName names the node; an incarnation is NodeName plus a start stamp.
	NodeName string
	// LeaseTTL is the TTL of the node's etcd lease (its liveness key), in
	// whole seconds. Default DefaultLeaseTTL.
	LeaseTTL time.Duration
	// GrantStreamSilence is how long the grant stream to the sequencer
	// leader may carry nothing (no grant, no close request, no heartbeat)
	// before the node drops it and finds the leader again. Default
	// DefaultGrantStreamSilence.
	GrantStreamSilence time.Duration
	// ReleaseTimeout bounds a Release call to a producer's previous owner
	// when the producer moves here; after it the previous owner's etcd
	// lease is revoked instead. Default DefaultReleaseTimeout.
	ReleaseTimeout time.Duration
	// Address is where other nodes reach this node's gRPC services (its
	// IngestPeer service for Release), published as the value of its
	// liveness key. Empty: nobody can ask this node to release a producer,
	// and producers move away from it by revoking its lease.
	Address string
	// PeerCredentials are how this node dials other nodes (Release to a
	// producer's previous owner); nil: plaintext.
	PeerCredentials credentials.TransportCredentials
	// UnreachableAfter is how long a ledger's store may leave entries
	// unacknowledged before the writer counts it unreachable (and closes the
	// ledger if fewer than A stores remain). Default DefaultUnreachableAfter.
	UnreachableAfter time.Duration
	// W, A and Tolerate are the replication of the node's ledgers.
	W, A, Tolerate int
	// AckMode, default AckQuorum.
	AckMode AckMode
	// LocalStore is the store id of this node's own WAL store ("" if none):
	// the store whose fsync AckLeader waits for.
	LocalStore string
	// MaxMessageBytes bounds one message's value. Default 1 MiB.
	MaxMessageBytes int
	// MaxFrameMessages bounds the messages in one produce frame. Default 10,000.
	MaxFrameMessages int
	// Admit, if set, is asked before a produce frame is accepted, with its
	// message count; an error (an *apierr.Error, say DISK_FULL) refuses
	// the frame whole, and nothing of it is logged. Frames accepted before
	// are logged and acknowledged as usual.
	Admit func(messages int) error
	// GroupCommitted, when set, is called with the group commit of every
	// frame that carried one and was logged (or was a duplicate of one
	// logged before), after its answer: the consumer groups store it.
	GroupCommitted func(*orderlogpb.GroupCommit)
	// Authorize, when set, checks InitProducer and every produce frame
	// (gRPC and HTTP) against the caller's principal before anything is
	// registered or queued. nil: no checks.
	Authorize Authorizer
	// Pipeline bounds batches.
	Pipeline pipeline.Config
	// DedupWindow is how many (seq → offset) pairs each producer remembers.
	DedupWindow int
	// RollBytes and RollAge roll the open ledger once it holds that many
	// entry bytes or is that old (DESIGN.md §6): a closed ledger can be
	// archived and deleted, and a takeover reads from the last roll on.
	// Defaults DefaultRollBytes, DefaultRollAge; negative: never.
	RollBytes int64
	RollAge   time.Duration
	// ProducerExpiry drops a producer idle for longer, at a roll (its next
	// frame is refused with PRODUCER_EXPIRED). Default
	// DefaultProducerExpiry; negative: never.
	ProducerExpiry time.Duration
	// ProducerActiveWindow: a producer session counts against its
	// principal's session limit (ProducerSessionLimit) while it started or
	// had a frame within this window; one idle longer does not count,
	// though it is held until ProducerExpiry. So a client that takes a new
	// producer name at each restart is locked out for at most the window,
	// not until its old sessions expire. Default
	// DefaultProducerActiveWindow.
	ProducerActiveWindow time.Duration
	// Logger reports failures the node retries by itself (a ledger that
	// cannot be created); nil discards.
	Logger *slog.Logger
	// Events is told of takeovers, lease loss, and the node's ledgers
	// opening and closing.
	Events event.Listener
	// Schemas checks messages against their topic's schema validation
	// (schema.Checker); nil checks nothing.
	Schemas SchemaChecker
}

// SchemaChecker says what a topic's schema validation makes of a message:
// the topic's mode, and a *schema.MismatchError when the value does not
// match the schema it names (or names none the topic has).
type SchemaChecker interface {
	Check(topic string, schemaID uint32, value []byte) (schema.Validation, error)
}

// Validate fills defaults and rejects nonsense.
func (c *Config) Validate() error {
	if c.NodeName == "" {
		return errors.New("ingest: NodeName is required")
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.LeaseTTL < 2*time.Second {
		return fmt.Errorf("ingest: LeaseTTL %s is below etcd's 2 s floor", c.LeaseTTL)
	}
	if c.LeaseTTL%time.Second != 0 {
		return fmt.Errorf("ingest: LeaseTTL %s is not a whole number of seconds (etcd leases are)", c.LeaseTTL)
	}
	if c.GrantStreamSilence == 0 {
		c.GrantStreamSilence = DefaultGrantStreamSilence
	}
	if c.UnreachableAfter == 0 {
		c.UnreachableAfter = DefaultUnreachableAfter
	}
	if c.ReleaseTimeout == 0 {
		c.ReleaseTimeout = DefaultReleaseTimeout
	}
	if c.GrantStreamSilence < 0 || c.UnreachableAfter < 0 || c.ReleaseTimeout < 0 {
		return errors.New("ingest: timeouts must be positive")
	}
	if c.GrantStreamSilence < minGrantStreamSilence {
		return fmt.Errorf("ingest: GrantStreamSilence %s is below %s (the leader's heartbeat is every %s)",
			c.GrantStreamSilence, minGrantStreamSilence, sequencer.GrantStreamHeartbeat)
	}
	if c.W == 0 {
		c.W, c.A = 1, 1
	}
	switch c.AckMode {
	case "", AckReplicated:
		c.AckMode = AckQuorum
	case AckQuorum, AckLeader:
	default:
		return fmt.Errorf("ingest: unknown ack mode %q (replicated, also called quorum, or leader)", c.AckMode)
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = 1 << 20
	}
	if c.MaxFrameMessages == 0 {
		c.MaxFrameMessages = 10_000
	}
	if c.RollBytes == 0 {
		c.RollBytes = DefaultRollBytes
	}
	if c.RollAge == 0 {
		c.RollAge = DefaultRollAge
	}
	if c.ProducerExpiry == 0 {
		c.ProducerExpiry = DefaultProducerExpiry
	}
	if c.ProducerActiveWindow <= 0 {
		c.ProducerActiveWindow = DefaultProducerActiveWindow
	}
	if c.MaxMessageBytes < 0 || c.MaxFrameMessages < 0 {
		return errors.New("ingest: limits must not be negative")
	}
	return c.Pipeline.Validate()
}

// Authorizer decides producer calls; internal/node implements it over
// internal/auth.
type Authorizer interface {
	// Principal is the caller's authenticated principal, "" when
	// authentication is off; an error (UNAUTHENTICATED) refuses the call.
	Principal(ctx context.Context) (string, error)
	// MayProduce refuses (PERMISSION_DENIED) a message of principal's to
	// topic.
	MayProduce(principal, topic string) error
}
