package coordinator

import (
	"fmt"

	"orderlog/proto/orderlogpb"
)

// simClient is an idempotent producer: it registers on its node, sends
// frames of new seqs (up to three in flight), sometimes sends an old range
// again, and registers again after any refusal or when its node crashed
// (then on the other node), continuing from the NextSeq it is given.
type simClient struct {
	name        string
	node        int
	id, epoch   uint64
	ready       bool
	initPending bool
	initToken   uint64
	session     int // bumped at every registration: answers of older sessions only count as acks
	nextSeq     uint64
	highestSent uint64 // one past the highest seq ever sent
	inFlight    int
	// sent is the value last sent for each seq: a retry sends the same
	// message again, while a new session sends new values from its NextSeq
	// on (a new instance does not know what the old one sent), so an ack
	// that hands a new message an old message's offset shows.
	sent map[uint64]string
}

// simSent is a frame a client sent.
type simSent struct {
	client   *simClient
	session  int
	firstSeq uint64
	values   []string
}

func (c *simClient) act(w *simWorld) bool {
	n := w.nodes[c.node]
	if !n.alive {
		return false
	}
	if other := w.nodes[1-c.node]; other.alive && w.rng.IntN(40) == 0 {
		// Cut off from its node, which lives on: the client goes to the
		// other node, which takes the producer over from a live owner.
		w.stats.moves++
		w.logf("%s moves to %s while %s lives", c.name, other.incarnation, n.incarnation)
		c.lost(w)
		return true
	}
	if c.ready && w.rng.IntN(30) == 0 {
		// The client restarts: a new instance registers again, fencing
		// the frames of the old one that are not accepted yet.
		w.logf("%s restarts", c.name)
		c.ready = false
	}
	if !c.ready {
		if c.initPending {
			return false
		}
		rec, err := w.register(c.name, n.incarnation)
		if err != nil {
			return true // InitProducer failed: the client tries again later
		}
		w.tokens++
		c.id, c.epoch, c.initToken, c.initPending = rec.id, rec.epoch, w.tokens, true
		c.session++
		c.inFlight = 0
		n.m.InitProducer(rec.id, rec.epoch, c.initToken)
		return true
	}
	if c.inFlight >= 3 {
		return false
	}
	first, count := c.nextSeq, 1+w.rng.IntN(3)
	retry := c.nextSeq > 0 && w.rng.IntN(5) == 0 // an old range again, same values
	if retry {
		first = uint64(w.rng.IntN(int(c.nextSeq)))
		count = min(count, int(c.nextSeq-first))
	}
	values := make([]string, count)
	for i := range values {
		seq := first + uint64(i)
		if !retry {
			c.sent[seq] = fmt.Sprintf("%s/%d/%d", c.name, c.session, seq)
		}
		values[i] = c.sent[seq]
	}
	if !retry {
		c.nextSeq += uint64(count)
		c.highestSent = max(c.highestSent, c.nextSeq)
	}
	c.inFlight++
	w.logf("%s sends seqs [%d,%d) to %s", c.name, first, first+uint64(count), n.incarnation)
	n.inbox = append(n.inbox, NewFrame(simRequest(c.id, c.epoch, first, values), &simSent{client: c, session: c.session, firstSeq: first, values: values}))
	return true
}

func (c *simClient) initialized(w *simWorld, done InitDone) {
	c.initPending = false
	if done.Err != nil {
		w.logf("%s: InitProducer refused: %v", c.name, done.Err)
		return
	}
	next := done.Response.NextSeq
	if next > c.highestSent {
		w.fatalf("%s: next seq %d, but only seqs below %d were ever sent", c.name, next, c.highestSent)
	}
	if acked := w.check.ackedThrough[c.id]; next < acked {
		w.fatalf("%s: next seq %d, but seqs below %d were acknowledged", c.name, next, acked)
	}
	c.ready, c.epoch, c.nextSeq = true, done.Response.Epoch, next
	w.logf("%s ready at epoch %d, next seq %d", c.name, c.epoch, next)
}

func (c *simClient) answered(w *simWorld, n *simNode, sent *simSent, resp *orderlogpb.ProduceResponse) {
	current := sent.session == c.session
	if current {
		c.inFlight--
	}
	if resp.ErrorCode != "" {
		w.stats.refusals++
		w.logf("%s: seqs [%d,%d) refused: %s", c.name, sent.firstSeq, sent.firstSeq+uint64(len(sent.values)), resp.ErrorCode)
		if current {
			c.ready = false
		}
		return
	}
	for i, ack := range resp.Acks {
		if !ack.DuplicateWithoutOffset {
			w.check.acked(c.id, sent.firstSeq+uint64(i), ack.Offset, sent.values[i])
		}
	}
	w.logf("%s: seqs [%d,%d) acknowledged by %s", c.name, sent.firstSeq, sent.firstSeq+uint64(len(sent.values)), n.incarnation)
}

// lost: the client's node crashed; it goes to the other node, where it
// either registers again or goes on with its session (its frames then make
// that node take the producer over).
func (c *simClient) lost(w *simWorld) {
	c.initPending, c.inFlight = false, 0
	c.node = 1 - c.node
	c.session++ // answers from the dead node never come
	if c.ready && w.rng.IntN(2) == 0 {
		w.logf("%s goes on with its session on n%d", c.name, c.node)
		return
	}
	c.ready = false
}

// simKeyedClient sends one-message frames with an Idempotency-Key: mostly
// new keys, sometimes one of its last three again.
type simKeyedClient struct {
	node     int
	nextKey  int
	recent   []string
	inFlight int // frames sent to the current node, not answered
	anon     int // at-least-once frames sent
}

// simKeyedSent is a keyed frame (key set) or an at-least-once one.
type simKeyedSent struct{ key, value string }

func (c *simKeyedClient) act(w *simWorld) bool {
	n := w.nodes[c.node]
	if !n.alive {
		return false
	}
	if other := w.nodes[1-c.node]; other.alive && w.rng.IntN(40) == 0 {
		w.stats.moves++
		w.logf("keyed client moves to %s while %s lives", other.incarnation, n.incarnation)
		c.lost()
		return true
	}
	c.inFlight++
	if w.rng.IntN(4) == 0 { // at least once: no producer, no key
		c.anon++
		value := fmt.Sprintf("anon/%d", c.anon)
		w.logf("%s sent to %s", value, n.incarnation)
		req := &orderlogpb.ProduceRequest{Messages: []*orderlogpb.Message{{Value: []byte(value)}}}
		n.inbox = append(n.inbox, NewFrame(req, &simKeyedSent{value: value}))
		return true
	}
	var key string
	if len(c.recent) > 0 && w.rng.IntN(3) == 0 {
		key = c.recent[w.rng.IntN(len(c.recent))]
	} else {
		c.nextKey++
		key = fmt.Sprintf("k%d", c.nextKey)
		c.recent = append(c.recent, key)
		if len(c.recent) > 3 {
			c.recent = c.recent[1:]
		}
	}
	req := &orderlogpb.ProduceRequest{IdempotencyKey: key, Messages: []*orderlogpb.Message{{Value: []byte(key)}}}
	w.logf("key %s sent to %s", key, n.incarnation)
	n.inbox = append(n.inbox, NewFrame(req, &simKeyedSent{key: key, value: key}))
	return true
}

func (c *simKeyedClient) answered(w *simWorld, n *simNode, sent *simKeyedSent, resp *orderlogpb.ProduceResponse) {
	if n.slot == c.node {
		c.inFlight--
	}
	if resp.ErrorCode != "" {
		w.logf("%s refused: %s", sent.value, resp.ErrorCode)
		return
	}
	ack := resp.Acks[0]
	switch {
	case sent.key == "":
		w.check.anonAcked(sent.value, ack.Offset)
	case !ack.DuplicateWithoutOffset:
		w.check.keyAcked(sent.key, ack.Offset)
	}
}

func (c *simKeyedClient) lost() { c.node, c.inFlight = 1-c.node, 0 }
