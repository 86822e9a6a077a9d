// Package client is orderlog's Go client: an idempotent, pipelining producer
// and range/tail readers over the public gRPC API (proto/orderlog.proto).
//
// # Endpoints
//
// Dial takes one node address or a comma-separated list
// ("h1:7070,h2:7070,h3:7070"). The client keeps one gRPC connection per
// endpoint, made lazily, and chooses the endpoint of each call itself,
// rather than leaving it to a gRPC resolver with the pick_first or
// round_robin policy: a producer must stay on one node (every stream on
// another node takes the producer over, DESIGN.md §6) and must know when it
// left a node, which a balancer hides; and a range read or tail that moves
// must resume from the last page it delivered, which only the client knows.
//
// Unary calls (Status, CreateTopic, InitProducer), reads, queries and tails
// go to the current endpoint and move to the next when its node fails:
// connection refused, UNAVAILABLE, a broken stream, or no answer within a
// few seconds (a paused node). An endpoint that failed is passed over for a
// few seconds. Reads and tails resume at the next endpoint from the last
// page's next offset, so every message is delivered once, in order.
//
// The cluster tells clients where its nodes are: Admin/Status lists the
// gRPC addresses of the live ingest nodes (from their etcd registrations).
// The client asks for them on Dial and whenever an endpoint fails, and adds
// them after the addresses it was dialled with, so Dial("h1:7070") learns
// h2 and h3.
//
// # Producers
//
// A Producer assigns sequence numbers itself and keeps every frame until it
// is acknowledged. Producers start at the endpoints in turn and stay at
// their node. When the stream breaks the producer reconnects and sends the
// unacknowledged frames again, in order, with their original
// (producer id, epoch, seq); the server answers those it already logged
// with their original offsets, so a message is logged once however often
// it is sent.
//
// When its node fails (the stream broke or could not be opened, or the node
// refused retryably three times in a row) the producer moves to the next
// endpoint and resends there, without calling InitProducer again (that
// would fence this instance with a new epoch). The new node takes the
// producer over: it becomes the owner in etcd, recovers the old owner's
// ledgers and rebuilds the producer's last durable seq and dedup window
// from them, then answers the resent frames. A refusal there means:
//   - PRODUCER_FENCED: a newer instance of the producer exists; fatal.
//   - PRODUCER_EXPIRED: the producer was idle past the cluster's
//     --producer-expiry and its state is gone; fatal for this instance:
//     NewProducer again (its sequence starts over at 0).
//   - OUT_OF_ORDER_SEQUENCE: resend from the oldest unacknowledged frame,
//     if the node's expected seq is one the producer still holds; if it
//     expects an older one, acknowledged messages are missing (possible
//     only in ack mode leader) and the producer fails.
//
// Errors are *apierr.Error values with stable codes.
package client
