package coordinator

import (
	"orderlog/ingest/pipeline"
	"orderlog/ingest/producer"
	"orderlog/internal/apierr"
)

// Handing a producer over to its next owner (DESIGN.md §6). Another node
// took the producer over in etcd and asks this node, the owner before, to
// release it, instead of revoking this node's lease (which costs every
// producer it owns). The previous owner stops taking the producer's frames,
// waits until none of its messages is in flight, answers with the
// producer's state — every message it logged for it, durable — and forgets
// the producer: it never logs another message of it. The next owner goes on
// from that state without reading the ledgers.

// ProducerReleased answers a ReleaseProducer: the producer's state (its
// dedup window, with an idempotency bucket's keys); or NotHeld, when this
// node logs nothing for it and holds no state of it (the caller takes the
// state from another holder or the ledgers); or why it was not released
// (the caller then fences this node instead).
type ProducerReleased struct {
	Token    uint64
	Producer uint64
	State    producer.State
	NotHeld  bool
	Err      error
}

// pendingRelease is a ReleaseProducer waiting for the producer's messages
// in flight.
type pendingRelease struct {
	token, producer uint64
}

// ReleaseProducer: another node now owns producer id in etcd and asks for
// it; token names the request. From now on its frames are refused
// (UNAVAILABLE: the client retries, at the new owner); ProducersReleased
// answers once nothing of it is in flight. A second request for a producer
// being released (its first asker died, and the next owner found this node
// through the producer's state ledger) gets the same answer.
//
// A producer without a session here, or whose takeover here has not
// settled, is not held: no message of it is in flight (a session is
// dropped only with none: a failed takeover or state record, a lost lease,
// a release), and this node has no state of it. Its takeover is given up
// (held frames refused) and the answer says NotHeld at once.
func (m *Machine) ReleaseProducer(id, token uint64) {
	s, ok := m.producers[id]
	if !ok || !s.settled {
		if ok {
			m.dropSession(id, movedError(id))
		}
		m.ready.ProducersReleased = append(m.ready.ProducersReleased, ProducerReleased{Token: token, Producer: id, NotHeld: true})
		return
	}
	s.releasing = true
	m.releases = append(m.releases, pendingRelease{token: token, producer: id})
}

// withdraw takes a releasing producer's messages that wait for a batch out
// of the pipeline and refuses them: they are not granted, appended or
// logged anywhere, so the release need not wait for a sequencer leader to
// grant them (it waits only for messages already in a batch). They are its
// last accepted seqs (the pipeline keeps each producer's order), so the
// table forgets them from the first one on; the client sends them again to
// the next owner.
//
// A message already acknowledged (ack mode leader acknowledges on the
// local fsync, and a ledger closed below it queues it again) is not
// withdrawn: the client was told it is logged, so it must be. Early acks
// follow entry order, so the acknowledged messages of the producer come
// first and the withdrawn ones are still its highest seqs.
func (m *Machine) withdraw(id uint64) {
	msgs := m.pipe.Withdraw(func(msg pipeline.Message) bool {
		ref := msg.Payload.(*MessageRef)
		return msg.ProducerID == id && ref.Frame.acks[ref.Index] == nil
	})
	if len(msgs) == 0 {
		return
	}
	m.table.Failed(id, msgs[0].Seq)
	refused := movedError(id)
	b := m.bucketOf[id]
	for _, msg := range msgs {
		ref := msg.Payload.(*MessageRef)
		ref.Frame.unlogged--
		m.refuse(ref.Frame, refused)
		m.releaseIfDone(ref.Frame)
		key := seqKey{id, msg.Seq}
		for _, w := range m.dupWaiters[key] {
			m.refuse(w.frame, refused)
		}
		delete(m.dupWaiters, key)
		if b != nil {
			delete(b.inFlight, b.seqKeys[msg.Seq])
			delete(b.seqKeys, msg.Seq)
		}
	}
}

// movedError refuses the frames of a producer being released.
func movedError(id uint64) error {
	return apierr.New(apierr.Unavailable, "producer %d moved to another node: retry there", id)
}

// answerReleases answers the releases whose producer has nothing in flight
// and drops their sessions (and an idempotency bucket's key memory: keyed
// frames that come here later register the bucket again).
func (m *Machine) answerReleases() {
	if len(m.releases) == 0 {
		return
	}
	kept := m.releases[:0]
	var handedOver []uint64
	for _, r := range m.releases {
		if _, ok := m.producers[r.producer]; !ok { // dropped meanwhile (a lost lease, a fenced record)
			m.ready.ProducersReleased = append(m.ready.ProducersReleased, ProducerReleased{Token: r.token, Producer: r.producer,
				Err: apierr.New(apierr.Unavailable, "producer %d was given up here", r.producer)})
			continue
		}
		m.withdraw(r.producer)
		if m.table.InFlight(r.producer) > 0 {
			kept = append(kept, r)
			continue
		}
		state, _ := m.table.Get(r.producer)
		state = m.withKeys([]producer.State{state})[0]
		m.ready.ProducersReleased = append(m.ready.ProducersReleased, ProducerReleased{Token: r.token, Producer: r.producer, State: state})
		handedOver = append(handedOver, r.producer)
	}
	clear(m.releases[len(kept):])
	m.releases = kept
	for _, id := range handedOver { // after every request for it is answered
		if b, ok := m.bucketOf[id]; ok {
			delete(m.bucketOf, id)
			b.producerID = 0
		}
		m.dropSession(id, movedError(id))
	}
}
