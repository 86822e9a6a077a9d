package ingest

import (
	"time"

	"orderlog/ingest/coordinator"
	"orderlog/proto/orderlogpb"
)

// frame is the node's side of a produce request: where its answer goes, the
// receive buffer to release, and the times for the stage metrics. The
// machine keeps the request's ack state in the embedded coordinator.Frame.
type frame struct {
	coordinator.Frame
	answer  func(*orderlogpb.ProduceResponse)
	release func() // nil once called (or if the request owns its bytes)
	arrived time.Time
	times   frameTimes
	// partitions are the messages' virtual partitions, set before the
	// frame is queued and copied into its acks.
	partitions []uint32
}

// frameTimes are when a frame passed the stages of the write path, for
// the per-frame stage metrics (zero: not reached).
type frameTimes struct {
	queued    time.Time // taken up by the node loop
	appended  time.Time // the entry holding its latest message was appended
	confirmed time.Time // that entry was confirmed
}

func newFrame(req *orderlogpb.ProduceRequest, release func(), answer func(*orderlogpb.ProduceResponse)) *frame {
	f := &frame{answer: answer, release: release, arrived: time.Now()}
	f.Frame = *coordinator.NewFrame(req, f)
	return f
}

// frameOf is the node's frame of a machine frame.
func frameOf(f *coordinator.Frame) *frame { return f.Owner.(*frame) }

// refuse answers a frame the machine never saw and releases its buffer.
func (f *frame) refuse(err error) {
	f.answer(coordinator.RefusalResponse(f.Request, err))
	f.releaseBuffer()
}

func (f *frame) releaseBuffer() {
	if f.release != nil {
		f.release()
		f.release = nil
	}
}
