package ingest

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"orderlog/ingest/producer"
	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// HTTP Idempotency-Key support (DESIGN.md §6): keys hash into buckets, and
// each bucket is a virtual producer — registered, owned, fenced and rebuilt
// like any other — whose messages carry their key as message id. A bucket
// remembers its recent keys → offsets; the keys travel in its producer
// snapshots and are re-read from its messages after a takeover.

// idempotencyBuckets is how many virtual producers carry keyed messages;
// a key always maps to the same one.
const idempotencyBuckets = 64

// reservedProducerPrefix names orderlog's own virtual producers; clients
// cannot register names under it.
const reservedProducerPrefix = "orderlog."

// maxIdempotencyKeyBytes bounds an Idempotency-Key.
const maxIdempotencyKeyBytes = 256

func bucketName(index int) string {
	return fmt.Sprintf("%sidempotency.%02d", reservedProducerPrefix, index)
}

func bucketIndex(key string) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % idempotencyBuckets)
}

// keyBucket is one virtual producer's key memory. Owned by the loop.
type keyBucket struct {
	index       int
	producerID  uint64 // 0 until registered
	epoch       uint64
	registering bool
	held        []*frame
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

func (n *Node) bucket(index int) *keyBucket {
	if n.buckets[index] == nil {
		window := n.cfg.DedupWindow
		if window <= 0 {
			window = producer.DefaultWindowSize
		}
		n.buckets[index] = &keyBucket{index: index, window: window, offsets: make(map[string]uint64),
			inFlight: make(map[string]uint64), seqKeys: make(map[uint64]string)}
	}
	return n.buckets[index]
}

// produceKeyed handles a one-message frame with an Idempotency-Key.
func (n *Node) produceKeyed(f *frame) {
	b := n.bucket(bucketIndex(f.request.IdempotencyKey))
	if b.producerID != 0 {
		n.produceInBucket(b, f)
		return
	}
	b.held = append(b.held, f)
	if b.registering {
		return
	}
	b.registering = true
	n.async(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := n.initProducer(ctx, bucketName(b.index))
		n.do(func() { n.bucketRegistered(b, resp, err) })
	})
}

func (n *Node) bucketRegistered(b *keyBucket, resp *orderlogpb.InitProducerResponse, err error) {
	b.registering = false
	held := b.held
	b.held = nil
	if err != nil {
		for _, f := range held {
			f.refuse(err)
		}
		return
	}
	b.producerID, b.epoch = resp.ProducerId, resp.Epoch
	n.bucketOf[b.producerID] = b
	if s, ok := n.producers[b.producerID]; ok {
		state, _ := n.table.Get(b.producerID)
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
		n.produceInBucket(b, f)
	}
}

// produceInBucket answers a known key with its offset, waits for one in
// flight, or logs the message as the bucket's next seq.
func (n *Node) produceInBucket(b *keyBucket, f *frame) {
	key := f.request.IdempotencyKey
	if offset, ok := b.offsets[key]; ok {
		f.ack(0, &orderlogpb.Ack{Offset: offset, Duplicate: true})
		return
	}
	if seq, ok := b.inFlight[key]; ok {
		k := seqKey{b.producerID, seq}
		n.dupWaiters[k] = append(n.dupWaiters[k], ackTarget{f, 0})
		return
	}
	next, ok := n.table.NextSeq(b.producerID)
	if !ok { // the bucket was taken over elsewhere: register again
		delete(n.bucketOf, b.producerID)
		b.producerID = 0
		n.produceKeyed(f)
		return
	}
	req := f.request
	req.ProducerId, req.Epoch, req.FirstSeq = b.producerID, b.epoch, next
	req.Messages[0].MessageId = []byte(key)
	b.inFlight[key], b.seqKeys[next] = next, key
	n.produceOwned(f)
	if f.remaining == 0 && f.acks[0] == nil { // refused
		delete(b.inFlight, key)
		delete(b.seqKeys, next)
	}
}

// keyLogged records that a bucket's seq is durable at offset.
func (n *Node) keyLogged(producerID, seq, offset uint64) {
	b, ok := n.bucketOf[producerID]
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
func (n *Node) withKeys(states []producer.State) []producer.State {
	for i := range states {
		if b, ok := n.bucketOf[states[i].ID]; ok {
			states[i].Keys = b.keysFor(len(states[i].Window))
		} else if s, ok := n.producers[states[i].ID]; ok && s.keyed && len(s.keys) == len(states[i].Window) {
			states[i].Keys = s.keys
		}
	}
	return states
}

func validateIdempotencyKey(req *orderlogpb.ProduceRequest) error {
	key := req.IdempotencyKey
	switch {
	case req.ProducerId != 0:
		return apierr.New(apierr.InvalidArgument, "use a producer session or an idempotency key, not both")
	case len(req.Messages) != 1:
		return apierr.New(apierr.InvalidArgument, "an idempotency key names exactly one message; send batches in a producer session")
	case len(key) > maxIdempotencyKeyBytes:
		return apierr.New(apierr.InvalidArgument, "idempotency key of %d bytes exceeds %d", len(key), maxIdempotencyKeyBytes)
	case len(req.Messages[0].MessageId) > 0 && string(req.Messages[0].MessageId) != key:
		return apierr.New(apierr.InvalidArgument, "message_id must be empty or equal to the idempotency key")
	}
	return nil
}

func checkProducerName(name string) error {
	if name == "" {
		return apierr.New(apierr.InvalidArgument, "producer name is required")
	}
	if strings.HasPrefix(name, reservedProducerPrefix) {
		return apierr.New(apierr.InvalidArgument, "producer names starting with %q are reserved", reservedProducerPrefix)
	}
	return nil
}
