package ingest

import "orderlog/ingest/pipeline"

// GrantSession is this node's session with the sequencer leader: the
// ingest side of the Sequencer/Grant stream (DESIGN.md §5). Calls do not
// block on the network; replies arrive on Replies in request order.
type GrantSession interface {
	// Epoch is the sequencer epoch ledgers must be created in.
	Epoch() int64
	// Streams counts the grant streams a leader accepted so far: a change
	// means a leader (a new one, or the same after a reconnection) grants
	// now.
	Streams() uint64
	// Grant asks for count offsets bound to ledger.
	Grant(batchID, ledger uint64, count int)
	// Written reports that span lies in entry of ledger (at a LAC advance).
	Written(ledger uint64, entry int64, span pipeline.Span)
	// Unused reports a grant for which no AddEntry was ever sent.
	Unused(ledger uint64, span pipeline.Span)
	// LedgerClosed tells the sequencer this node closed ledger.
	LedgerClosed(ledger uint64)
	// Replies delivers grant answers.
	Replies() <-chan GrantReply
	// Close ends the session.
	Close()
}

// GrantReply answers one Grant call. A refused grant (Err != nil) means the
// ledger can take no more grants: the node closes it and opens another.
type GrantReply struct {
	BatchID uint64
	Ledger  uint64
	First   uint64
	Err     error
}
