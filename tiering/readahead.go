package tiering

import (
	"context"
	"errors"

	"google.golang.org/protobuf/proto"

	"orderlog/proto/orderlogpb"
)

// readPageMessages is the page size the worker reads the log in. The
// reader also ends a page at 4 MiB of messages (reader.PageBytes): about
// 3,600 messages of 1 KiB.
const readPageMessages = 4096

// readAheadPages is how many read pages wait for the build at most.
const readAheadPages = 2

// readAhead reads the committed log on its own goroutine, page after page,
// while the build appends the page before to its file: reading (ledger
// entries, protobuf) and encoding (Arrow, zstd) then run on two cores.
// It stops at limit, at an error, at a page that makes no progress, or when
// stopped; the channel is closed after the last page.
type readAhead struct {
	limit  uint64 // the offset it reads up to
	pages  chan logPage
	ctx    context.Context
	cancel context.CancelFunc
}

// logPage is a page of the log, or the error that ended the reading.
type logPage struct {
	from  uint64
	page  *orderlogpb.ReadResponse
	sizes []int // sizes[i] is proto.Size(page.Messages[i]), below limit
	err   error
}

func startReadAhead(ctx context.Context, log LogSource, from, limit uint64) *readAhead {
	ctx, cancel := context.WithCancel(ctx)
	r := &readAhead{limit: limit, pages: make(chan logPage, readAheadPages), ctx: ctx, cancel: cancel}
	go r.run(ctx, log, from, limit)
	return r
}

func (r *readAhead) run(ctx context.Context, log LogSource, from, limit uint64) {
	defer close(r.pages)
	for from < limit {
		page, err := log.ReadRaw(ctx, from, readPageMessages)
		p := logPage{from: from, page: page, err: err}
		if err == nil {
			p.sizes = messageSizes(page.Messages, limit)
		}
		select {
		case r.pages <- p:
		case <-ctx.Done():
			return
		}
		if err != nil || page.NextOffset <= from {
			return
		}
		from = page.NextOffset
	}
}

// messageSizes are the protobuf sizes of msgs below limit (what the cut
// policy counts), computed here rather than on the build's goroutine.
func messageSizes(msgs []*orderlogpb.StoredMessage, limit uint64) []int {
	sizes := make([]int, 0, len(msgs))
	for _, m := range msgs {
		if m.Offset >= limit {
			break
		}
		sizes = append(sizes, proto.Size(m))
	}
	return sizes
}

// next returns the next page; the context's error when it ended the
// reading, and an error when nothing is left to read (next asked past
// limit or past a page without progress).
func (r *readAhead) next() (logPage, error) {
	if p, ok := <-r.pages; ok {
		return p, nil
	}
	if err := r.ctx.Err(); err != nil {
		return logPage{}, err
	}
	return logPage{}, errors.New("the read ahead stopped")
}

// stop ends the reading and waits for the goroutine to end; pages read
// and not taken are dropped.
func (r *readAhead) stop() {
	r.cancel()
	for range r.pages {
	}
}
