package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"orderlog/internal/apierr"
	"orderlog/internal/grpcopt"
	"orderlog/proto/orderlogpb"
)

// Client is a connection to one orderlog node.
type Client struct {
	conn     *grpc.ClientConn
	producer orderlogpb.ProducerClient
	reader   orderlogpb.ReaderClient
	admin    orderlogpb.AdminClient
}

// Dial connects to an orderlog gRPC address (host:port). The connection is
// made lazily and re-made after failures.
func Dial(addr string) (*Client, error) {
	conn, err := grpc.NewClient(addr, grpcopt.DialOptions()...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return &Client{
		conn:     conn,
		producer: orderlogpb.NewProducerClient(conn),
		reader:   orderlogpb.NewReaderClient(conn),
		admin:    orderlogpb.NewAdminClient(conn),
	}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Status returns the server's view of the log.
func (c *Client) Status(ctx context.Context) (*orderlogpb.StatusResponse, error) {
	resp, err := c.admin.Status(ctx, &orderlogpb.StatusRequest{})
	if err != nil {
		return nil, apierr.FromGRPC(err)
	}
	return resp, nil
}

// CreateTopic creates a topic.
func (c *Client) CreateTopic(ctx context.Context, name string) error {
	_, err := c.admin.CreateTopic(ctx, &orderlogpb.CreateTopicRequest{Name: name})
	if err != nil {
		return apierr.FromGRPC(err)
	}
	return nil
}

// RawProducer is the generated Producer client, for callers (and tests)
// that manage sequence numbers themselves.
func (c *Client) RawProducer() orderlogpb.ProducerClient { return c.producer }

// WaitReady waits until the server answers Status with a sequencer epoch:
// a leader serves and the server's reader follows it.
func (c *Client) WaitReady(ctx context.Context) error {
	for {
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := c.Status(callCtx)
		cancel()
		if err == nil && st.Epoch > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("orderlog not ready: %w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitCommitted waits until the committed watermark C is at least offset.
// An acknowledged message is durable at once and readable once C passes
// it, normally a few milliseconds later.
func (c *Client) WaitCommitted(ctx context.Context, offset uint64) error {
	for {
		st, err := c.Status(ctx)
		if err == nil && st.Committed >= offset {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("C did not reach %d: %w (last: %v, %v)", offset, ctx.Err(), st, err)
		case <-time.After(2 * time.Millisecond):
		}
	}
}
