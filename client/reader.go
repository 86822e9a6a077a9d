package client

import (
	"context"
	"errors"
	"io"

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
// watermark, until ctx ends or fn returns an error.
func (c *Client) Tail(ctx context.Context, from uint64, fn func(*Page) error) error {
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
