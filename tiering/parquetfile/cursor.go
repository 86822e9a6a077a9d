package parquetfile

import (
	"context"
	"io"
	"sync"

	"orderlog/proto/orderlogpb"
)

// A Cursor decodes its stretch in chunks of up to cursorChunkRows rows
// (the first of a batch, then twice the previous: a read of a few rows
// decodes little ahead), cursorWorkers at a time: the chunk its user takes
// messages from, and the next.
const (
	cursorChunkRows = 8 * readBatchRows
	cursorWorkers   = 2
)

// Cursor reads the messages of an offset range in order, as Read does,
// for a user that takes them a few at a time and may pause between (a
// node's pages): it decodes ahead of its user, the next chunk of rows on
// another goroutine while the user takes the current one's, so that two
// cores decompress and decode while a third step (a page sent) goes on.
// A Cursor is used by one goroutine at a time; Close ends it.
type Cursor struct {
	chunks  <-chan chan cursorBatch // every chunk's batches, in row order
	chunk   <-chan cursorBatch      // the chunk being taken from
	stop    context.CancelFunc
	done    chan struct{} // closed when every decoding goroutine returned
	current []*orderlogpb.StoredMessage
	err     error // after the last message: io.EOF or why the reading failed
}

type cursorBatch struct {
	messages []*orderlogpb.StoredMessage
	err      error
}

// Cursor returns a cursor over the messages at offsets [from, to) (clipped
// to the file's range). Its reads use a context of its own, which Close
// cancels; each Peek waits with its caller's.
func (f *File) Cursor(from, to uint64) *Cursor {
	ctx, stop := context.WithCancel(context.Background())
	chunks := make(chan chan cursorBatch, cursorWorkers-1)
	c := &Cursor{chunks: chunks, stop: stop, done: make(chan struct{})}
	from, to = f.index.clip(from, to)
	go func() {
		defer close(c.done)
		defer close(chunks)
		if from < to {
			f.decodeChunks(ctx, f.index.rowsBelow(from), f.index.rowsBelow(to), chunks)
		}
	}()
	return c
}

// decodeChunks decodes rows [start, end) a chunk at a time, up to
// cursorWorkers chunks at once, each into a channel that holds all its
// batches (a decoder never waits for the user), handed to chunks in row
// order. It returns once every decoder has, when ctx ends or all is done.
func (f *File) decodeChunks(ctx context.Context, start, end int64, chunks chan<- chan cursorBatch) {
	var decoders sync.WaitGroup
	defer decoders.Wait()
	slots := make(chan struct{}, cursorWorkers)
	for chunkStart, size := start, int64(readBatchRows); chunkStart < end; size = min(2*size, cursorChunkRows) {
		chunkEnd := f.chunkEnd(chunkStart, end, size)
		out := make(chan cursorBatch, (chunkEnd-chunkStart+readBatchRows-1)/readBatchRows+1)
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		select {
		case chunks <- out:
		case <-ctx.Done():
			return
		}
		decoders.Add(1)
		go func(start, end int64) {
			defer decoders.Done()
			defer func() { <-slots }()
			defer close(out)
			if err := f.decodeRows(ctx, start, end, out); err != nil {
				out <- cursorBatch{err: err}
			}
		}(chunkStart, chunkEnd)
		chunkStart = chunkEnd
	}
}

// chunkEnd is the end of a chunk of about size rows starting at row start:
// the next multiple of size (a multiple of readBatchRows) from the start
// of start's row group (where the pages of a column of large values begin
// and end every readBatchRows rows), within the row group and below end.
func (f *File) chunkEnd(start, end, size int64) int64 {
	g := f.groupOf(start)
	groupStart := f.groupStart[g]
	next := groupStart + ((start-groupStart)/size+1)*size
	return min(next, f.groupStart[g+1], end)
}

// decodeRows decodes rows [start, end) into batches sent to out, which
// has room for all of them.
func (f *File) decodeRows(ctx context.Context, start, end int64, out chan<- cursorBatch) error {
	v, err := f.at(ctx)
	if err != nil {
		return err
	}
	return v.readBatches(ctx, start, end, v.allFields(), func(batch []*orderlogpb.StoredMessage) error {
		out <- cursorBatch{messages: batch}
		return nil
	})
}

// Peek returns the next message without taking it, io.EOF after the last
// one, or the error that ended the reading (then every later call returns
// it too). It waits for the message at most until ctx ends.
func (c *Cursor) Peek(ctx context.Context) (*orderlogpb.StoredMessage, error) {
	for len(c.current) == 0 {
		if c.err != nil {
			return nil, c.err
		}
		if c.chunk == nil {
			select {
			case chunk, ok := <-c.chunks:
				if !ok {
					c.err = io.EOF
				}
				c.chunk = chunk
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			continue
		}
		select {
		case b, ok := <-c.chunk:
			switch {
			case !ok:
				c.chunk = nil
			case b.err != nil:
				c.err = b.err
			default:
				c.current = b.messages
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return c.current[0], nil
}

// Take drops the message Peek returned: the next Peek returns the one
// after it. The caller owns the message.
func (c *Cursor) Take() {
	if len(c.current) > 0 {
		c.current[0] = nil
		c.current = c.current[1:]
	}
}

// Close stops the decoding and releases the column readers; it returns
// once they are released.
func (c *Cursor) Close() {
	c.stop()
	<-c.done
	c.chunk, c.current, c.err = nil, nil, io.EOF
}
