package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Fault kinds the harness injects.
const (
	KillSequencerLeader = "kill-sequencer-leader"
	KillEtcdLeader      = "kill-etcd-leader"
	KillProducerNode    = "kill-producer-node"
	KillOther           = "kill-other-node"
	Pause               = "pause"
	Partition           = "partition"
	WipeWAL             = "wipe-wal"
	FlipWALByte         = "flip-wal-byte"
)

// FaultKinds lists every kind, in the order a mixed run cycles through them.
var FaultKinds = []string{KillSequencerLeader, Partition, KillProducerNode, Pause, FlipWALByte, KillEtcdLeader, WipeWAL, KillOther}

// Fault is one injected fault.
type Fault struct {
	Kind   string
	Node   *Node
	At     time.Time
	Detail string
	// Roles lists what the node was when the fault began: sequencer
	// leader, etcd raft leader, the tracked gRPC producer's node.
	Roles string
	// OnDamaged are the ledgers open on the node when its journal was
	// damaged (FlipWALByte): the writers must roll them once it is back.
	OnDamaged []uint64
	// heal undoes the fault: restart, SIGCONT, or rejoin the partition.
	heal func() error
}

// Inject starts a fault of kind on the cluster. producerNode names the
// node a gRPC producer streams to; hold is how long a pause or partition
// lasts at least (longer than the leases).
func (c *Cluster) Inject(ctx context.Context, kind string, rng *rand.Rand, producerNode *Node) (*Fault, error) {
	var target *Node
	leader, etcdLeader := c.SequencerLeader(ctx), c.EtcdLeader(ctx)
	switch kind {
	case KillSequencerLeader, Partition:
		target = leader
	case KillEtcdLeader:
		target = etcdLeader
	case KillProducerNode, Pause:
		target = producerNode
	case KillOther:
		for _, n := range c.Nodes {
			if n != leader && n != producerNode {
				target = n
			}
		}
	}
	if target == nil {
		target = c.Nodes[rng.IntN(len(c.Nodes))]
	}
	// Which roles the target held tells which timeouts the fault costs.
	f := &Fault{Kind: kind, Node: target, At: time.Now(), Roles: rolesOf(target, leader, etcdLeader, producerNode)}
	restart := func() error { return c.Start(target) }
	switch kind {
	case Pause:
		c.Pause(target)
		f.heal = func() error { c.Resume(target); return nil }
	case Partition:
		c.Partition(target)
		f.heal = func() error { c.Heal(target); return nil }
	case WipeWAL:
		c.Kill(target)
		if err := c.WipeWAL(target); err != nil {
			return nil, err
		}
		f.heal = restart
	case FlipWALByte:
		c.Kill(target)
		f.OnDamaged, _ = c.OpenLedgersOn(ctx, target) // best effort: etcd has a quorum without it
		file, pos, err := c.FlipByte(target, rng)
		if err != nil {
			f.Detail = err.Error()
		} else {
			f.Detail = fmt.Sprintf("flipped byte %d of %s", pos, file)
		}
		f.heal = restart
	default:
		c.Kill(target)
		f.heal = restart
	}
	return f, nil
}

// Heal undoes the fault.
func (f *Fault) Heal() error { return f.heal() }

// rolesOf names the roles n holds ("-" for none).
func rolesOf(n, sequencerLeader, etcdLeader, producerNode *Node) string {
	var roles []string
	if n == sequencerLeader {
		roles = append(roles, "sequencer-leader")
	}
	if n == etcdLeader {
		roles = append(roles, "etcd-leader")
	}
	if n == producerNode {
		roles = append(roles, "producer-node")
	}
	if len(roles) == 0 {
		return "-"
	}
	return strings.Join(roles, ",")
}
