package coordinator

import (
	"fmt"
	"hash/fnv"

	"orderlog/ingest/producer"
	"orderlog/proto/orderlogpb"
)

// HTTP Idempotency-Key support (DESIGN.md §6): keys hash into buckets, and
// each bucket is a virtual producer — registered, owned, fenced and rebuilt
// like any other — whose messages carry their key as message id. A bucket
// remembers its recent keys → offsets; the keys travel in its producer
// snapshots and are re-read from its messages after a takeover.

// IdempotencyBuckets is how many virtual producers carry keyed messages;
// a key always maps to the same one.
const IdempotencyBuckets = 64

// ReservedProducerPrefix names orderlog's own virtual producers; clients
// cannot register names under it.
const ReservedProducerPrefix = "orderlog."

// BucketName is the producer name of idempotency bucket index.
func BucketName(index int) string {
	return fmt.Sprintf("%sidempotency.%02d", ReservedProducerPrefix, index)
}

// BucketIndex is the bucket an Idempotency-Key belongs to.
func BucketIndex(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % IdempotencyBuckets)
}

// keyBucket is one virtual producer's key memory.
type keyBucket struct {
	index       int
	producerID  uint64 // 0 until registered
	epoch       uint64
	registering bool
	held        []*Frame
	window      int
	recent      []keyedOffset     // durable keys in seq order, at most window
	offsets     map[string]uint64 // key → offset, for recent
	inFlight    map[string]uint64 // key → seq, accepted and not yet durable
	seqKeys     map[uint64]string // seq → key, the inverse of inFlight
}

type keyedOffset struct {
	key    string
	offset uint64
}

func (b *keyBucket) remember(key string, offset uint64) {
	b.recent = append(b.recent, keyedOffset{key, offset})
	if key != "" {
		b.offsets[key] = offset
	}
	if len(b.recent) > b.window {
		old := b.recent[0]
		if b.offsets[old.key] == old.offset {
			delete(b.offsets, old.key)
		}
		b.recent = b.recent[1:]
	}
}

// keysFor returns the keys of the last n durable seqs, aligned with a
// window of n offsets ("" where a key is not known).
func (b *keyBucket) keysFor(n int) []string {
	keys := make([]string, n)
	for i := 0; i < n && i < len(b.recent); i++ {
		keys[n-1-i] = b.recent[len(b.recent)-1-i].key
	}
	return keys
}

func (m *Machine) bucket(index int) *keyBucket {
	if m.buckets[index] == nil {
		window := m.cfg.DedupWindow
		if window <= 0 {
			window = producer.DefaultWindowSize
		}
		m.buckets[index] = &keyBucket{index: index, window: window, offsets: make(map[string]uint64),
			inFlight: make(map[string]uint64), seqKeys: make(map[uint64]string)}
	}
	return m.buckets[index]
}

// produceKeyed handles a one-message frame with an Idempotency-Key.
func (m *Machine) produceKeyed(f *Frame) {
	b := m.bucket(BucketIndex(f.Request.IdempotencyKey))
	if b.producerID != 0 {
		m.produceInBucket(b, f)
		return
	}
	b.held = append(b.held, f)
	if !b.registering {
		b.registering = true
		m.ready.RegisterBuckets = append(m.ready.RegisterBuckets, b.index)
	}
}

// BucketRegistered: etcd made this node the owner of bucket index's
// producer id at epoch. Its keyed frames go on once the session is ready.
func (m *Machine) BucketRegistered(index int, id, epoch uint64) {
	m.initSession(id, epoch, true)
	m.inits = append(m.inits, &pendingInit{producer: id, epoch: epoch, bucket: index})
}

// BucketRegistrationFailed: registering bucket index failed; its held
// frames are refused with err.
func (m *Machine) BucketRegistrationFailed(index int, err error) {
	m.bucketRegistered(m.bucket(index), nil, err)
}

func (m *Machine) bucketRegistered(b *keyBucket, resp *orderlogpb.InitProducerResponse, err error) {
	b.registering = false
	held := b.held
	b.held = nil
	if err != nil {
		for _, f := range held {
			m.refuse(f, err)
		}
		return
	}
	b.producerID, b.epoch = resp.ProducerId, resp.Epoch
	m.bucketOf[b.producerID] = b
	if s, ok := m.producers[b.producerID]; ok {
		state, _ := m.table.Get(b.producerID)
		for i, offset := range state.Window {
			key := ""
			if len(s.keys) == len(state.Window) {
				key = s.keys[i]
			}
			b.remember(key, offset)
		}
		s.keys = nil // the bucket keeps them from now on
	}
	for _, f := range held {
		m.produceInBucket(b, f)
	}
}

// produceInBucket answers a known key with its offset, waits for one in
// flight, or logs the message as the bucket's next seq.
func (m *Machine) produceInBucket(b *keyBucket, f *Frame) {
	key := f.Request.IdempotencyKey
	if offset, ok := b.offsets[key]; ok {
		m.ack(f, 0, &orderlogpb.Ack{Offset: offset, Duplicate: true})
		return
	}
	if seq, ok := b.inFlight[key]; ok {
		k := seqKey{b.producerID, seq}
		m.dupWaiters[k] = append(m.dupWaiters[k], ackTarget{f, 0})
		return
	}
	next, ok := m.table.NextSeq(b.producerID)
	if !ok { // the bucket was taken over elsewhere: register again
		delete(m.bucketOf, b.producerID)
		b.producerID = 0
		m.produceKeyed(f)
		return
	}
	req := f.Request
	req.ProducerId, req.Epoch, req.FirstSeq = b.producerID, b.epoch, next
	req.Messages[0].MessageId = []byte(key)
	b.inFlight[key], b.seqKeys[next] = next, key
	m.produceOwned(f)
	if f.response != nil && f.acks[0] == nil { // refused
		delete(b.inFlight, key)
		delete(b.seqKeys, next)
	}
}

// keyLogged records that a bucket's seq is durable at offset.
func (m *Machine) keyLogged(producerID, seq, offset uint64) {
	b, ok := m.bucketOf[producerID]
	if !ok {
		return
	}
	key := b.seqKeys[seq]
	delete(b.seqKeys, seq)
	delete(b.inFlight, key)
	b.remember(key, offset)
}

// withKeys adds the buckets' keys to producer snapshots: from the bucket
// once it is registered, before that from the state its takeover rebuilt.
func (m *Machine) withKeys(states []producer.State) []producer.State {
	for i := range states {
		if b, ok := m.bucketOf[states[i].ID]; ok {
			states[i].Keys = b.keysFor(len(states[i].Window))
		} else if s, ok := m.producers[states[i].ID]; ok && s.keyed && len(s.keys) == len(states[i].Window) {
			states[i].Keys = s.keys
		}
	}
	return states
}
