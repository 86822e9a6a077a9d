package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"orderlog/internal/apierr"
	"orderlog/internal/grpcopt"
	"orderlog/proto/orderlogpb"
)

// Client is a connection to an orderlog cluster: one gRPC connection per
// node endpoint, made lazily.
type Client struct {
	endpoints *endpointSet
	// refreshing is true while a background Refresh runs; background
	// counts those goroutines, which end with ctx (cancelled by Close).
	refreshing atomic.Bool
	background sync.WaitGroup
	ctx        context.Context
	cancel     context.CancelFunc
}

// Dial connects to an orderlog cluster through one node address
// (host:port) or a comma-separated list of them ("h1:7070,h2:7070"), in
// plaintext unless an option says otherwise (WithTLS). Connections are
// made lazily and re-made after failures. Dial asks a node for the
// cluster's other endpoints in the background (see Refresh).
func Dial(addrs string, opts ...Option) (*Client, error) {
	seeds, err := ParseEndpoints(addrs)
	if err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	dial := grpcopt.DialOptionsWith(o.creds)
	if o.token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer(o.token)))
	}
	c := &Client{endpoints: newEndpointSet(seeds, dial)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if _, err := c.endpoints.conn(seeds[0]); err != nil {
		c.cancel()
		return nil, err
	}
	c.refreshSoon()
	return c, nil
}

// Close closes the connections. Calls still running fail.
func (c *Client) Close() error {
	c.cancel()
	c.background.Wait()
	return c.endpoints.close()
}

// Status returns a node's view of the log, from the first endpoint that
// answers.
func (c *Client) Status(ctx context.Context) (*orderlogpb.StatusResponse, error) {
	var resp *orderlogpb.StatusResponse
	err := c.unary(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		resp, err = orderlogpb.NewAdminClient(conn).Status(ctx, &orderlogpb.StatusRequest{})
		return err
	})
	if err != nil {
		return nil, apierr.FromGRPC(err)
	}
	return resp, nil
}

// CreateTopic creates a topic. A retry on another node after a lost answer
// can find the topic made by the first attempt: TOPIC_EXISTS.
func (c *Client) CreateTopic(ctx context.Context, name string) error {
	err := c.unary(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := orderlogpb.NewAdminClient(conn).CreateTopic(ctx, &orderlogpb.CreateTopicRequest{Name: name})
		return err
	})
	if err != nil {
		return apierr.FromGRPC(err)
	}
	return nil
}

// CreateTopicWith creates a topic with the request's partition count and
// cleanup configuration, and returns it as created.
func (c *Client) CreateTopicWith(ctx context.Context, req *orderlogpb.CreateTopicRequest) (*orderlogpb.Topic, error) {
	var topic *orderlogpb.Topic
	err := c.unary(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		topic, err = orderlogpb.NewAdminClient(conn).CreateTopic(ctx, req)
		return err
	})
	if err != nil {
		return nil, apierr.FromGRPC(err)
	}
	return topic, nil
}

// RawProducer is the generated Producer client of the current endpoint,
// for callers (and tests) that manage sequence numbers and nodes
// themselves.
func (c *Client) RawProducer() orderlogpb.ProducerClient {
	conn, err := c.endpoints.conn(c.endpoints.current())
	if err != nil {
		return orderlogpb.NewProducerClient(closedConn{})
	}
	return orderlogpb.NewProducerClient(conn)
}

// closedConn fails every call: the client is closed.
type closedConn struct{}

func (closedConn) Invoke(context.Context, string, any, any, ...grpc.CallOption) error {
	return errClientClosed
}

func (closedConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errClientClosed
}

// WaitReady waits until a node answers Status with a sequencer epoch: a
// leader serves and the node's reader follows it.
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

// ListTopics returns every topic with its partition count and cleanup
// configuration.
func (c *Client) ListTopics(ctx context.Context) ([]*orderlogpb.Topic, error) {
	var resp *orderlogpb.ListTopicsResponse
	err := c.unary(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		resp, err = orderlogpb.NewAdminClient(conn).ListTopics(ctx, &orderlogpb.ListTopicsRequest{})
		return err
	})
	if err != nil {
		return nil, apierr.FromGRPC(err)
	}
	return resp.Topics, nil
}

// ListPartitions returns a topic's virtual partitions (empty topic: the
// default topic) with the log's bounds.
func (c *Client) ListPartitions(ctx context.Context, topic string) (*orderlogpb.ListPartitionsResponse, error) {
	var resp *orderlogpb.ListPartitionsResponse
	err := c.unary(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		resp, err = orderlogpb.NewAdminClient(conn).ListPartitions(ctx, &orderlogpb.ListPartitionsRequest{Topic: topic})
		return err
	})
	if err != nil {
		return nil, apierr.FromGRPC(err)
	}
	return resp, nil
}
