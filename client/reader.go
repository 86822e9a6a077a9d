package client

import (
	"context"
	"errors"
	"io"
	"time"

	"orderlog/internal/apierr"
	"orderlog/proto/orderlogpb"
)

// Page is one frame of a read: messages in offset order and the holes
// skipped among them.
type Page = orderlogpb.ReadResponse

// Read calls fn for each frame of messages in [from, committed watermark),
// at most limit messages (0 = no limit), in offset order.
func (c *Client) Read(ctx context.Context, from uint64, limit uint32, fn func(*Page) error) error {
	stream, err := c.reader.Read(ctx, &orderlogpb.ReadRequest{FromOffset: from, Limit: limit})
	if err != nil {
		return apierr.FromGRPC(err)
	}
	return drain(stream, fn)
}

// Tail calls fn for each frame from offset from on, following the committed
// watermark, until ctx ends or fn returns an error. A tail broken by a
// retryable error (the node restarting, a leader change) is taken up again
// from the next offset after a pause, so fn still sees every message once,
// in order.
func (c *Client) Tail(ctx context.Context, from uint64, fn func(*Page) error) error {
	next, pause := from, tailRetryFirst
	for {
		err := c.tailOnce(ctx, next, func(p *Page) error {
			next, pause = p.NextOffset, tailRetryFirst
			if err := fn(p); err != nil {
				return callerError{err}
			}
			return nil
		})
		var fromCaller callerError
		switch {
		case errors.As(err, &fromCaller):
			return fromCaller.err
		case ctx.Err() != nil:
			return err
		case err == nil || apierr.As(err).Class() != apierr.ClassRetry:
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, tailRetryMax)
	}
}

// The pauses before a broken tail is taken up again.
const (
	tailRetryFirst = 50 * time.Millisecond
	tailRetryMax   = 2 * time.Second
)

// callerError carries an error fn returned through the stream's drain.
type callerError struct{ err error }

func (e callerError) Error() string { return e.err.Error() }

func (c *Client) tailOnce(ctx context.Context, from uint64, fn func(*Page) error) error {
	stream, err := c.reader.Tail(ctx, &orderlogpb.TailRequest{FromOffset: from})
	if err != nil {
		return apierr.FromGRPC(err)
	}
	return drain(stream, fn)
}

// Query is Read filtered by topic and/or key, still in global order.
func (c *Client) Query(ctx context.Context, req *orderlogpb.QueryRequest, fn func(*Page) error) error {
	stream, err := c.reader.Query(ctx, req)
	if err != nil {
		return apierr.FromGRPC(err)
	}
	return drain(stream, fn)
}

type pageStream interface {
	Recv() (*orderlogpb.ReadResponse, error)
}

func drain(stream pageStream, fn func(*Page) error) error {
	for {
		page, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return apierr.FromGRPC(err)
		}
		if err := fn(page); err != nil {
			return err
		}
	}
}
