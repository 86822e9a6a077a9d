package ingest

import "errors"

// Ready returns nil when the node can take produce traffic: it is
// registered (NewNode created its liveness key) and its grant session has a
// stream open to the sequencer leader. Otherwise it says what the node
// waits for.
func (n *Node) Ready() error {
	select {
	case <-n.stop:
		return errors.New("ingest: node stopped")
	default:
	}
	reg := n.current()
	if reg.lease == 0 {
		return errors.New("ingest: registering in etcd (after a lost lease)")
	}
	if s, ok := reg.grants.(*SequencerSession); ok && !s.connected() {
		return errors.New("ingest: no grant stream to a sequencer leader yet")
	}
	if reg.grants.Epoch() == 0 {
		return errors.New("ingest: no sequencer epoch known yet")
	}
	return nil
}

// Registered returns nil while the node holds its etcd registration, so it
// can own producers (though writes may wait for a sequencer leader), and
// says why not otherwise: a node cut off from etcd loses its lease and
// registers again, and its producers are better served elsewhere.
func (n *Node) Registered() error {
	select {
	case <-n.stop:
		return errors.New("ingest: node stopped")
	default:
	}
	if n.current().lease == 0 {
		return errors.New("ingest: registering in etcd (after a lost lease)")
	}
	return nil
}

// HasGrantStream reports whether the node's grant session has a stream
// open to the sequencer leader.
func (n *Node) HasGrantStream() bool {
	s, ok := n.current().grants.(*SequencerSession)
	return ok && s.connected()
}

// connected reports whether a grant stream to the leader is open.
func (s *SequencerSession) connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.client != nil
}
