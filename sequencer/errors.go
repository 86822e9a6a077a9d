package sequencer

import "errors"

// ErrNotLeader is returned (and mapped to gRPC UNAVAILABLE) when a node
// that is not the serving leader gets a grant stream or a commit-map
// subscription.
var ErrNotLeader = errors.New("sequencer: not the leader")

// ErrNoHello is returned when a grant stream's first frame has no Hello.
var ErrNoHello = errors.New("sequencer: grant stream must start with Hello")
