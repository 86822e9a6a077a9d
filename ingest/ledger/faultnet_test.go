package ledger

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"runtime"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"orderlog/proto/walpb"
)

// faultNet is the fault-injecting transport: a Dialer per actor (writer,
// recoverers, readers) whose clients implement walpb.WALClient over the
// slots' real gRPC clients, and drop, delay and reorder replies, partition
// an actor from a slot, and see crashed slots as unreachable. Every reply
// the stores give passes through it, so it also checks that no store
// answered ABSENT for an entry it had acknowledged.
//
// The fate of a reply is a function of the seed and of the reply itself
// (actor, slot, call, ledger, entry, and how many times the same reply
// was seen before), never of which goroutine drew from a shared generator
// first or of the wall clock: a delay is a count of yields to the
// scheduler, not a duration. Every fault is written to the trace.
type faultNet struct {
	slots map[string]*storeSlot
	seed  uint64
	// Probabilities per reply.
	dropRate, delayRate, reorderRate float64
	// maxDelay is the most yields a delayed reply waits.
	maxDelay int
	// stepped keeps a reordering within one reply frame (taking the next
	// frame ahead depends on whether it has arrived yet) and spares the
	// refusals of a wiped store, which no step waits for.
	stepped bool

	mu struct {
		sync.Mutex
		// attempts counts the replies seen per fault key.
		attempts    map[faultKey]int
		partitioned map[[2]string]bool
		// readsCut blocks only Fence, ReadEntry, ReadEntries and LastEntry.
		readsCut map[[2]string]bool
		streams  map[[2]string]map[*faultStream]bool
		// acked holds, for entries a store incarnation acknowledged, the
		// event number at which the ack was seen.
		acked map[heldKey]uint64
		// events numbers observations, so a read is compared only with acks
		// seen before it was sent (a reply can be seen after a later ack).
		events uint64
		// closedAt is the last entry a store incarnation was told a ledger closed at.
		closedAt   map[heldKey]int64
		violations []string
		// answers counts each store incarnation's read answers per entry
		// and status, so a test can wait until a recovery has asked again
		// and again instead of for a fixed time.
		answers map[answerKey]int
		// replies counts the replies each actor got, so a test can stop
		// an actor after a number of replies instead of after a time.
		replies map[string]int
		// tick is closed (and replaced) at every observed reply.
		tick chan struct{}
		// trace is every fault injected, in the order decided.
		trace []string
		// quiet suspends every reply fault.
		quiet bool
		// delivered holds the acks an actor's stream handed on (Recv)
		// rather than dropped.
		delivered map[deliveredKey]bool
	}
}

type deliveredKey struct {
	actor string
	heldKey
}

// faultKey names a reply for the fault decisions: the same reply gets the
// same fate in every run of a seed.
type faultKey struct {
	actor, slot, call string
	ledger            uint64
	entry             int64
}

type answerKey struct {
	heldKey
	status walpb.EntryStatus
}

type heldKey struct {
	slot        string
	incarnation uint64
	ledger      uint64
	entry       int64 // -1 in closedAt keys
}

func newFaultNet(seed uint64, slots []*storeSlot) *faultNet {
	n := &faultNet{slots: make(map[string]*storeSlot), seed: seed}
	for _, s := range slots {
		n.slots[s.name] = s
	}
	n.mu.attempts = make(map[faultKey]int)
	n.mu.replies = make(map[string]int)
	n.mu.tick = make(chan struct{})
	n.mu.delivered = make(map[deliveredKey]bool)
	n.mu.partitioned = make(map[[2]string]bool)
	n.mu.readsCut = make(map[[2]string]bool)
	n.mu.streams = make(map[[2]string]map[*faultStream]bool)
	n.mu.acked = make(map[heldKey]uint64)
	n.mu.closedAt = make(map[heldKey]int64)
	n.mu.answers = make(map[answerKey]int)
	return n
}

func (n *faultNet) dialer(actor string) Dialer {
	return DialerFunc(func(m Member) (walpb.WALClient, error) {
		if _, ok := n.slots[m.Address]; !ok {
			return nil, fmt.Errorf("no slot %q", m.Address)
		}
		return &faultClient{net: n, actor: actor, slot: m.Address}, nil
	})
}

// partition cuts (or heals) the actor from the slot; open streams break.
func (n *faultNet) partition(actor, slot string, cut bool) {
	n.mu.Lock()
	n.mu.partitioned[[2]string{actor, slot}] = cut
	var victims []*faultStream
	if cut {
		for s := range n.mu.streams[[2]string{actor, slot}] {
			victims = append(victims, s)
		}
	}
	n.mu.Unlock()
	for _, s := range victims {
		s.cancel()
	}
}

// cutReads blocks (or unblocks) the actor's fences and reads to the slot
// while its appends still pass.
func (n *faultNet) cutReads(actor, slot string, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.readsCut[[2]string{actor, slot}] = cut
}

func (n *faultNet) routeRead(actor, slot string) (walpb.WALClient, error) {
	n.mu.Lock()
	cut := n.mu.readsCut[[2]string{actor, slot}]
	n.mu.Unlock()
	if cut {
		return nil, errUnreachable
	}
	return n.route(actor, slot)
}

// fate is the generator that decides one reply's faults: seeded by the
// net's seed, the reply's key and how many times that key was seen.
type fate struct {
	net   *faultNet
	key   faultKey
	try   int
	rng   *rand.Rand
	quiet bool
}

func (n *faultNet) fateOf(k faultKey) *fate {
	n.mu.Lock()
	n.mu.attempts[k]++
	try, quiet := n.mu.attempts[k], n.mu.quiet
	n.mu.replies[k.actor]++
	close(n.mu.tick)
	n.mu.tick = make(chan struct{})
	n.mu.Unlock()
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%s|%s|%d|%d|%d", k.actor, k.slot, k.call, k.ledger, k.entry, try)
	return &fate{net: n, key: k, try: try, quiet: quiet, rng: rand.New(rand.NewPCG(n.seed, h.Sum64()))}
}

// chance draws whether a fault of the given kind happens; if so it is
// traced.
func (f *fate) chance(kind string, p float64) bool {
	if f.quiet || p <= 0 || f.rng.Float64() >= p {
		return false
	}
	f.net.note(fmt.Sprintf("%s %s->%s %s ledger=%d entry=%d try=%d", kind, f.key.actor, f.key.slot, f.key.call, f.key.ledger, f.key.entry, f.try))
	return true
}

// note appends a line to the trace.
func (n *faultNet) note(line string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.trace = append(n.mu.trace, line)
}

// takeTrace returns the trace so far and starts a new one.
func (n *faultNet) takeTrace() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	t := n.mu.trace
	n.mu.trace = nil
	return t
}

// setQuiet suspends (or resumes) every reply fault.
func (n *faultNet) setQuiet(quiet bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.quiet = quiet
}

// deliver records the acks of a reply the actor's stream handed on.
func (n *faultNet) deliver(actor, slot string, incarnations map[int64]uint64, r *walpb.AddEntriesResponse) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, res := range r.Results {
		if res.Code == walpb.AddCode_ADD_OK {
			n.mu.delivered[deliveredKey{actor, heldKey{slot, incarnations[res.EntryId], res.LedgerId, res.EntryId}}] = true
		}
	}
	close(n.mu.tick)
	n.mu.tick = make(chan struct{})
}

// deliveredTo reports whether the actor got the store incarnation's ack of
// the entry.
func (n *faultNet) deliveredTo(actor, slot string, incarnation, ledger uint64, entry int64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.delivered[deliveredKey{actor, heldKey{slot, incarnation, ledger, entry}}]
}

// answered returns a channel closed at the next reply any actor gets.
func (n *faultNet) answered() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.tick
}

// repliesTo is how many replies the actor got.
func (n *faultNet) repliesTo(actor string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.replies[actor]
}

var errUnreachable = status.Error(codes.Unavailable, "faultnet: unreachable")

func (n *faultNet) route(actor, slot string) (walpb.WALClient, error) {
	n.mu.Lock()
	cut := n.mu.partitioned[[2]string{actor, slot}]
	n.mu.Unlock()
	if cut {
		return nil, errUnreachable
	}
	c, ok := n.slots[slot].client()
	if !ok {
		return nil, errUnreachable
	}
	return c, nil
}

// replyFault decides the fate of a reply the store already gave: dropped
// (an error, as from a lost connection), or delayed by yielding the
// processor a seeded number of times.
func (n *faultNet) replyFault(ctx context.Context, f *fate) error {
	if f.chance("drop", n.dropRate) {
		return status.Error(codes.Unavailable, "faultnet: reply dropped")
	}
	if f.chance("delay", n.delayRate) {
		for range f.rng.IntN(n.maxDelay + 1) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			runtime.Gosched()
		}
	}
	return nil
}

func (n *faultNet) observeAck(slot string, incarnation, ledger uint64, entry int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := heldKey{slot, incarnation, ledger, entry}
	if _, ok := n.mu.acked[k]; !ok {
		n.mu.events++
		n.mu.acked[k] = n.mu.events
	}
}

// now is the event number a read takes before it is sent.
func (n *faultNet) now() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.events++
	return n.mu.events
}

// observeRead checks an ABSENT answer against the acks seen before the
// read was sent (at event sentAt).
func (n *faultNet) observeRead(sentAt uint64, slot string, incarnation, ledger uint64, entry int64, s walpb.EntryStatus) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.answers[answerKey{heldKey{slot, incarnation, ledger, entry}, s}]++
	if s != walpb.EntryStatus_ABSENT {
		return
	}
	if at, ok := n.mu.acked[heldKey{slot, incarnation, ledger, entry}]; !ok || at > sentAt {
		return
	}
	if last, closed := n.mu.closedAt[heldKey{slot, incarnation, ledger, -1}]; closed && entry > last {
		return // dropped because the ledger closed before it
	}
	n.mu.violations = append(n.mu.violations,
		fmt.Sprintf("store %s incarnation %d answered ABSENT for ledger %d entry %d it had acknowledged", slot, incarnation, ledger, entry))
}

func (n *faultNet) observeClose(slot string, incarnation, ledger uint64, last int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := heldKey{slot, incarnation, ledger, -1}
	if prev, ok := n.mu.closedAt[k]; !ok || last < prev {
		n.mu.closedAt[k] = last
	}
}

// answersFor is how many times the store answered s for the ledger's entry.
func (n *faultNet) answersFor(store Member, ledger uint64, entry int64, s walpb.EntryStatus) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.answers[answerKey{heldKey{store.Address, store.Incarnation, ledger, entry}, s}]
}

func (n *faultNet) violations() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.mu.violations...)
}

// faultClient is one actor's view of one slot.
type faultClient struct {
	net   *faultNet
	actor string
	slot  string
}

func (c *faultClient) fate(call string, ledger uint64, entry int64) *fate {
	return c.net.fateOf(faultKey{actor: c.actor, slot: c.slot, call: call, ledger: ledger, entry: entry})
}

func (c *faultClient) ReadEntry(ctx context.Context, in *walpb.ReadEntryRequest, opts ...grpc.CallOption) (*walpb.ReadEntryResponse, error) {
	cl, err := c.net.routeRead(c.actor, c.slot)
	if err != nil {
		return nil, err
	}
	sentAt := c.net.now()
	resp, err := cl.ReadEntry(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	c.net.observeRead(sentAt, c.slot, in.StoreIncarnation, in.LedgerId, in.EntryId, resp.Status)
	return resp, c.net.replyFault(ctx, c.fate("read", in.LedgerId, in.EntryId))
}

func (c *faultClient) ReadEntries(ctx context.Context, in *walpb.ReadEntriesRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[walpb.ReadEntryResponse], error) {
	cl, err := c.net.routeRead(c.actor, c.slot)
	if err != nil {
		return nil, err
	}
	sentAt := c.net.now()
	stream, err := cl.ReadEntries(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	return &faultReadStream{ServerStreamingClient: stream, client: c, req: in, ctx: ctx, sentAt: sentAt}, nil
}

type faultReadStream struct {
	grpc.ServerStreamingClient[walpb.ReadEntryResponse]
	client *faultClient
	req    *walpb.ReadEntriesRequest
	ctx    context.Context
	sentAt uint64
}

func (s *faultReadStream) Recv() (*walpb.ReadEntryResponse, error) {
	resp, err := s.ServerStreamingClient.Recv()
	if err != nil {
		return nil, err
	}
	s.client.net.observeRead(s.sentAt, s.client.slot, s.req.StoreIncarnation, s.req.LedgerId, resp.EntryId, resp.Status)
	return resp, s.client.net.replyFault(s.ctx, s.client.fate("reads", s.req.LedgerId, resp.EntryId))
}

func (c *faultClient) LastEntry(ctx context.Context, in *walpb.LastEntryRequest, opts ...grpc.CallOption) (*walpb.LastEntryResponse, error) {
	cl, err := c.net.routeRead(c.actor, c.slot)
	if err != nil {
		return nil, err
	}
	resp, err := cl.LastEntry(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	return resp, c.net.replyFault(ctx, c.fate("last", in.LedgerId, -1))
}

func (c *faultClient) Fence(ctx context.Context, in *walpb.FenceRequest, opts ...grpc.CallOption) (*walpb.FenceResponse, error) {
	cl, err := c.net.routeRead(c.actor, c.slot)
	if err != nil {
		return nil, err
	}
	resp, err := cl.Fence(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	return resp, c.net.replyFault(ctx, c.fate("fence", in.LedgerId, -1))
}

func (c *faultClient) CloseLedger(ctx context.Context, in *walpb.CloseLedgerRequest, opts ...grpc.CallOption) (*walpb.CloseLedgerResponse, error) {
	cl, err := c.net.route(c.actor, c.slot)
	if err != nil {
		return nil, err
	}
	c.net.observeClose(c.slot, in.StoreIncarnation, in.LedgerId, in.LastEntry)
	resp, err := cl.CloseLedger(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	return resp, c.net.replyFault(ctx, c.fate("close", in.LedgerId, in.LastEntry))
}

func (c *faultClient) DeleteLedger(ctx context.Context, in *walpb.DeleteLedgerRequest, opts ...grpc.CallOption) (*walpb.DeleteLedgerResponse, error) {
	cl, err := c.net.route(c.actor, c.slot)
	if err != nil {
		return nil, err
	}
	return cl.DeleteLedger(ctx, in, opts...)
}

func (c *faultClient) Info(ctx context.Context, in *walpb.InfoRequest, opts ...grpc.CallOption) (*walpb.InfoResponse, error) {
	cl, err := c.net.route(c.actor, c.slot)
	if err != nil {
		return nil, err
	}
	return cl.Info(ctx, in, opts...)
}

func (c *faultClient) AddEntries(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[walpb.AddEntriesRequest, walpb.AddEntriesResponse], error) {
	cl, err := c.net.route(c.actor, c.slot)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := cl.AddEntries(ctx, opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &faultStream{BidiStreamingClient: stream, client: c, ctx: ctx, cancel: cancel,
		frames: make(chan frameOrErr, 64), incarnations: make(map[int64]uint64)}
	key := [2]string{c.actor, c.slot}
	c.net.mu.Lock()
	if c.net.mu.streams[key] == nil {
		c.net.mu.streams[key] = make(map[*faultStream]bool)
	}
	c.net.mu.streams[key][s] = true
	c.net.mu.Unlock()
	go s.pump(key)
	return s, nil
}

type frameOrErr struct {
	resp *walpb.AddEntriesResponse
	err  error
}

// faultStream wraps one AddEntries stream. A pump goroutine reads the
// store's replies (recording acks as the store gave them); Recv then drops
// (breaking the stream, as a lost connection does), delays or reorders them.
type faultStream struct {
	grpc.BidiStreamingClient[walpb.AddEntriesRequest, walpb.AddEntriesResponse]
	client *faultClient
	ctx    context.Context
	cancel context.CancelFunc
	frames chan frameOrErr
	held   *frameOrErr
	imu    sync.Mutex
	// incarnations: entry id → incarnation the request named.
	incarnations map[int64]uint64
}

func (s *faultStream) pump(key [2]string) {
	defer func() {
		s.client.net.mu.Lock()
		delete(s.client.net.mu.streams[key], s)
		s.client.net.mu.Unlock()
	}()
	for {
		resp, err := s.BidiStreamingClient.Recv()
		if err == nil {
			s.imu.Lock()
			for _, r := range resp.Results {
				if r.Code == walpb.AddCode_ADD_OK {
					s.client.net.observeAck(s.client.slot, s.incarnations[r.EntryId], r.LedgerId, r.EntryId)
				}
			}
			s.imu.Unlock()
		}
		select {
		case s.frames <- frameOrErr{resp, err}:
		case <-s.ctx.Done():
			if err == nil {
				continue
			}
		}
		if err != nil {
			return
		}
	}
}

func (s *faultStream) Send(req *walpb.AddEntriesRequest) error {
	if _, err := s.client.net.route(s.client.actor, s.client.slot); err != nil {
		s.cancel()
		return err
	}
	s.imu.Lock()
	for _, e := range req.Entries {
		s.incarnations[e.EntryId] = e.StoreIncarnation
	}
	s.imu.Unlock()
	return s.BidiStreamingClient.Send(req)
}

func (s *faultStream) Recv() (*walpb.AddEntriesResponse, error) {
	var f frameOrErr
	if s.held != nil {
		f, s.held = *s.held, nil
	} else {
		select {
		case f = <-s.frames:
		case <-s.ctx.Done():
			return nil, s.ctx.Err()
		}
	}
	if f.err != nil {
		return nil, f.err
	}
	net := s.client.net
	if net.stepped && !anyAdded(f.resp) {
		return f.resp, nil
	}
	fate := s.client.fate("add", frameLedger(f.resp), frameLastEntry(f.resp))
	if !net.stepped && fate.chance("reorder", net.reorderRate) {
		select {
		case g := <-s.frames:
			if g.err == nil {
				s.held = &f
				f = g
			} else {
				s.held = &g
			}
		default:
		}
	}
	if fate.chance("shuffle", net.reorderRate) {
		fate.rng.Shuffle(len(f.resp.Results), func(i, j int) {
			f.resp.Results[i], f.resp.Results[j] = f.resp.Results[j], f.resp.Results[i]
		})
	}
	if err := net.replyFault(s.ctx, fate); err != nil {
		s.cancel()
		return nil, err
	}
	s.imu.Lock()
	net.deliver(s.client.actor, s.client.slot, s.incarnations, f.resp)
	s.imu.Unlock()
	return f.resp, nil
}

func anyAdded(r *walpb.AddEntriesResponse) bool {
	for _, res := range r.Results {
		if res.Code == walpb.AddCode_ADD_OK {
			return true
		}
	}
	return false
}

// frameLedger and frameLastEntry name an AddEntries reply by its ledger and
// highest entry, for its fault key.
func frameLedger(r *walpb.AddEntriesResponse) uint64 {
	if len(r.Results) == 0 {
		return 0
	}
	return r.Results[0].LedgerId
}

func frameLastEntry(r *walpb.AddEntriesResponse) int64 {
	last := int64(-1)
	for _, res := range r.Results {
		last = max(last, res.EntryId)
	}
	return last
}
