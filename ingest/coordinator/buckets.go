package coordinator

import (
	"fmt"
	"hash/fnv"
	"strings"

	"orderlog/ingest/producer"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// HTTP Idempotency-Key support (DESIGN.md §6): keys hash into buckets, and
// each bucket is a virtual producer — registered, owned, fenced and rebuilt
// like any other — whose messages carry their key as message id. A bucket
// remembers its recent keys → offsets and request digests; they travel in
// its producer snapshots and are re-read from its messages after a
// takeover. As the IETF draft asks, a key reused with another body is
// refused (IDEMPOTENCY_KEY_REUSED) and one whose first request is still
// in flight answered IDEMPOTENCY_KEY_IN_FLIGHT.

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

// IsBucketName reports whether a producer name is an idempotency bucket's.
func IsBucketName(name string) bool {
	return strings.HasPrefix(name, ReservedProducerPrefix+"idempotency.")
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
	recent      []keyedOffset          // durable keys in seq order, at most window
	offsets     map[string]keyedOffset // key → its entry in recent
	inFlight    map[string]pendingKey  // accepted and not yet durable
	seqKeys     map[uint64]string      // seq → key, the inverse of inFlight
}

// keyedOffset is a durable key: its offset and its request's digest
// (RequestDigest; 0 if not known).
type keyedOffset struct {
	key    string
	offset uint64
	digest uint64
}

// pendingKey is a key whose message is accepted and not yet durable.
type pendingKey struct {
	seq    uint64
	digest uint64
}

func (b *keyBucket) remember(key string, offset, digest uint64) {
	entry := keyedOffset{key, offset, digest}
	b.recent = append(b.recent, entry)
	if key != "" {
		b.offsets[key] = entry
	}
	if len(b.recent) > b.window {
		old := b.recent[0]
		if b.offsets[old.key].offset == old.offset {
			delete(b.offsets, old.key)
		}
		b.recent = b.recent[1:]
	}
}

// keysFor returns the keys and digests of the last n durable seqs, aligned
// with a window of n offsets ("" and 0 where not known).
func (b *keyBucket) keysFor(n int) ([]string, []uint64) {
	keys, digests := make([]string, n), make([]uint64, n)
	for i := 0; i < n && i < len(b.recent); i++ {
		e := b.recent[len(b.recent)-1-i]
		keys[n-1-i], digests[n-1-i] = e.key, e.digest
	}
	return keys, digests
}

func (m *Machine) bucket(index int) *keyBucket {
	if m.buckets[index] == nil {
		window := m.cfg.DedupWindow
		if window <= 0 {
			window = producer.DefaultWindowSize
		}
		m.buckets[index] = &keyBucket{index: index, window: window, offsets: make(map[string]keyedOffset),
			inFlight: make(map[string]pendingKey), seqKeys: make(map[uint64]string)}
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
			key, digest := "", uint64(0)
			if len(s.keys) == len(state.Window) {
				key = s.keys[i]
			}
			if len(s.digests) == len(state.Window) {
				digest = s.digests[i]
			}
			b.remember(key, offset, digest)
		}
		s.keys, s.digests = nil, nil // the bucket keeps them from now on
	}
	for _, f := range held {
		m.produceInBucket(b, f)
	}
}

// produceInBucket answers a known key with its offset, refuses a key in
// flight or reused with another body, or logs the message as the bucket's
// next seq.
func (m *Machine) produceInBucket(b *keyBucket, f *Frame) {
	key := f.Request.IdempotencyKey
	if known, ok := b.offsets[key]; ok {
		if reused(known.digest, f.digest) {
			m.refuse(f, keyReusedError(key, fmt.Sprintf("offset %d", known.offset)))
			return
		}
		m.ack(f, 0, &orderlogpb.Ack{Offset: known.offset, Duplicate: true})
		return
	}
	if pending, ok := b.inFlight[key]; ok {
		if reused(pending.digest, f.digest) {
			m.refuse(f, keyReusedError(key, "a request in flight"))
			return
		}
		// The IETF draft's answer (409): the first request's outcome is
		// not known yet; the client retries later and then gets it.
		m.refuse(f, apierr.New(apierr.IdempotencyKeyInFlight, "the first request with Idempotency-Key %q has no outcome yet: retry", key))
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
	b.inFlight[key], b.seqKeys[next] = pendingKey{seq: next, digest: f.digest}, key
	m.produceOwned(f)
	if f.response != nil && f.acks[0] == nil { // refused
		delete(b.inFlight, key)
		delete(b.seqKeys, next)
	}
}

// reused reports whether two digests of one key's requests differ; a
// digest not known (0) matches any.
func reused(known, asked uint64) bool { return known != 0 && asked != 0 && known != asked }

func keyReusedError(key, first string) error {
	return apierr.New(apierr.IdempotencyKeyReused, "Idempotency-Key %q already names another request (%s) with a different body; nothing was logged", key, first)
}

// keyLogged records that a bucket's seq is durable at offset.
func (m *Machine) keyLogged(producerID, seq, offset uint64) {
	b, ok := m.bucketOf[producerID]
	if !ok {
		return
	}
	key := b.seqKeys[seq]
	digest := b.inFlight[key].digest
	delete(b.seqKeys, seq)
	delete(b.inFlight, key)
	b.remember(key, offset, digest)
}

// withKeys adds the buckets' keys to producer snapshots: from the bucket
// once it is registered, before that from the state its takeover rebuilt.
func (m *Machine) withKeys(states []producer.State) []producer.State {
	for i := range states {
		if b, ok := m.bucketOf[states[i].ID]; ok {
			states[i].Keys, states[i].Digests = b.keysFor(len(states[i].Window))
		} else if s, ok := m.producers[states[i].ID]; ok && s.keyed && len(s.keys) == len(states[i].Window) {
			states[i].Keys = s.keys
			if len(s.digests) == len(s.keys) {
				states[i].Digests = s.digests
			}
		}
	}
	return states
}
