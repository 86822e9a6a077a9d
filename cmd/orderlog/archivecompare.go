package main

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
	"orderlog/tiering"
	"orderlog/tiering/parquetfile"
)

// compareWithLog reads the file's range from the log through the public
// read API and checks that it serves the file's rows (proto.Equal) and
// holes. The log may hide messages from reads (a topic's own retention)
// that the archive keeps: those offsets, skipped with a reason, are not
// compared. The file and the log are read side by side, a page of the
// log ahead at most, so a file of any size is compared in little memory.
func (v *verifier) compareWithLog(file archivedFile, f *parquetfile.File) {
	e := file.entry
	ctx, cancel := context.WithCancel(v.s.ctx)
	defer cancel()
	items := make(chan logItem, 1024)
	readDone := make(chan error, 1)
	go func() { readDone <- readLogRange(ctx, v.log, e.First, e.End, items) }()
	compared, hidden, err := matchLog(ctx, f, e, items, readDone, cancel)
	if err != nil && v.passedBelowLogStart(e.First) {
		v.sum.BelowLogStart++ // retention moved the log start over it meanwhile
		return
	}
	if err != nil {
		v.fileProblem(file, "against the log: %v", err)
		return
	}
	v.sum.ComparedFiles++
	v.sum.ComparedMessages += compared
	v.sum.HiddenOffsets += hidden
}

// matchLog compares the file of entry e with the log's read of its range
// (items, closed at the read's end, and then its error on readDone): the
// same messages but those the log hides, and the same holes. It calls
// stop once it needs no more items.
func matchLog(ctx context.Context, f *parquetfile.File, e tiering.ManifestEntry, items <-chan logItem, readDone <-chan error,
	stop context.CancelFunc) (compared int64, hidden uint64, err error) {
	cur := &logCursor{items: items}
	compared, hidden, err = compareRows(ctx, f, cur)
	if err == nil {
		if lm := cur.peek(); lm != nil {
			err = fmt.Errorf("the log has a message at %d that the file lacks", lm.Offset)
		}
	}
	stop()
	cur.drain()
	if readErr := <-readDone; err == nil && readErr != nil {
		err = fmt.Errorf("read [%d, %d) from the log: %w", e.First, e.End, readErr)
	}
	if err == nil && !slices.Equal(cur.holes, e.Holes) {
		err = fmt.Errorf("the log's holes are %v, the file's %v", cur.holes, e.Holes)
	}
	return compared, hidden, err
}

// compareRows walks the file's rows and the log's messages together.
func compareRows(ctx context.Context, f *parquetfile.File, cur *logCursor) (compared int64, hidden uint64, err error) {
	meta := f.Meta()
	err = f.Read(ctx, meta.First, meta.End, func(row *orderlogpb.StoredMessage) error {
		lm := cur.peek()
		switch {
		case lm != nil && lm.Offset < row.Offset:
			return fmt.Errorf("the log has a message at %d that the file lacks", lm.Offset)
		case lm != nil && lm.Offset == row.Offset:
			cur.take()
			if !proto.Equal(lm, row) {
				return fmt.Errorf("the message at %d differs from the log's (%s)", row.Offset, firstDifference(row, lm))
			}
			compared++
		case cur.hides(row.Offset):
			hidden++
		default:
			return fmt.Errorf("the file has a message at %d that the log does not serve", row.Offset)
		}
		return nil
	})
	return compared, hidden, err
}

// passedBelowLogStart reports whether the log start is now above first.
func (v *verifier) passedBelowLogStart(first uint64) bool {
	before := *v.sum.LogStart
	if err := v.readLogStart(); err != nil {
		v.sum.LogStart = &before
		return false
	}
	return *v.sum.LogStart > first
}

// firstDifference names the first field in which a and b differ.
func firstDifference(a, b *orderlogpb.StoredMessage) string {
	am, bm := a.GetMessage(), b.GetMessage()
	switch {
	case a.GetProducerId() != b.GetProducerId() || a.GetProducerSeq() != b.GetProducerSeq():
		return "producer id or seq"
	case a.GetIngestTimeUs() != b.GetIngestTimeUs():
		return "ingest time"
	case am.GetTopic() != bm.GetTopic():
		return "topic"
	case string(am.GetKey()) != string(bm.GetKey()):
		return "key"
	case string(am.GetValue()) != string(bm.GetValue()):
		return "payload"
	case !slices.EqualFunc(am.GetHeaders(), bm.GetHeaders(), func(x, y *orderlogpb.Header) bool { return proto.Equal(x, y) }):
		return "headers"
	case am.GetClientTimeUs() != bm.GetClientTimeUs():
		return "client time"
	case string(am.GetMessageId()) != string(bm.GetMessageId()):
		return "message id"
	}
	return "another field"
}

// logItem is a message of the log or a range its read skipped.
type logItem struct {
	message *orderlogpb.StoredMessage
	skipped *orderlogpb.SkippedRange
}

// errReadPast ends a read of the log once it reached the file's end.
var errReadPast = errors.New("the read reached the file's end")

// readLogRange reads [first, end) from the log into items, each page's
// skipped ranges (clipped to the range) before its messages, and closes
// items. It fails if the log's read ends below end.
func readLogRange(ctx context.Context, cl *client.Client, first, end uint64, items chan<- logItem) error {
	defer close(items)
	next := first
	send := func(it logItem) error {
		select {
		case items <- it:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := cl.Read(ctx, first, 0, func(p *client.Page) error {
		for _, s := range p.Skipped {
			if lo, hi := max(s.First, first), min(s.End, end); lo < hi {
				if err := send(logItem{skipped: &orderlogpb.SkippedRange{First: lo, End: hi, Reason: s.Reason}}); err != nil {
					return err
				}
			}
		}
		for _, m := range p.Messages {
			if m.Offset >= end {
				break
			}
			if err := send(logItem{message: m}); err != nil {
				return err
			}
		}
		next = max(next, p.NextOffset)
		if next >= end {
			return errReadPast
		}
		return nil
	})
	switch {
	case errors.Is(err, errReadPast):
		return nil
	case err != nil:
		return err
	case next < end:
		return fmt.Errorf("the log's read ended at %d", next)
	}
	return nil
}

// logCursor hands out the log's messages in offset order and keeps the
// ranges its read skipped: holes (no reason) merged into maximal runs,
// and the ranges it hides (a reason) not yet passed.
type logCursor struct {
	items  <-chan logItem
	peeked *orderlogpb.StoredMessage
	done   bool
	holes  []tiering.Hole
	hidden []*orderlogpb.SkippedRange
}

// peek returns the next message (nil at the end), taking in the skipped
// ranges that come before it. Every skipped range below the message it
// returns has then been taken in: a page's skipped ranges come before
// its messages, and pages come in offset order.
func (c *logCursor) peek() *orderlogpb.StoredMessage {
	for c.peeked == nil && !c.done {
		it, ok := <-c.items
		switch {
		case !ok:
			c.done = true
		case it.skipped != nil:
			c.noteSkipped(it.skipped)
		default:
			c.peeked = it.message
		}
	}
	return c.peeked
}

// take consumes the peeked message.
func (c *logCursor) take() { c.peeked = nil }

// drain takes in what is left (the read was cancelled or ended).
func (c *logCursor) drain() {
	for c.peek() != nil {
		c.take()
	}
}

func (c *logCursor) noteSkipped(s *orderlogpb.SkippedRange) {
	if s.Reason != "" {
		c.hidden = append(c.hidden, s)
		return
	}
	if n := len(c.holes); n > 0 && c.holes[n-1].End == s.First {
		c.holes[n-1].End = s.End
		return
	}
	c.holes = append(c.holes, tiering.Hole{First: s.First, End: s.End})
}

// hides reports whether the log hides offset (asked in increasing order,
// after peek).
func (c *logCursor) hides(offset uint64) bool {
	for len(c.hidden) > 0 && c.hidden[0].End <= offset {
		c.hidden = c.hidden[1:]
	}
	return len(c.hidden) > 0 && c.hidden[0].First <= offset
}
