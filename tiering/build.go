package tiering

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/protobuf/proto"

	"orderlog/proto/orderlogpb"
	"orderlog/tiering/parquetfile"
)

// LogSource reads the committed log for the archive.
type LogSource interface {
	// Committed is C, and whether it is known yet.
	Committed() (uint64, bool)
	// ReadRaw reads a page from offset from as a read does, holes as
	// skipped ranges, but with every message: none hidden by its topic's
	// retention (the archive keeps them; reads hide them).
	ReadRaw(ctx context.Context, from uint64, limit int) (*orderlogpb.ReadResponse, error)
}

// readPageMessages is the page size the worker reads the log in.
const readPageMessages = 1000

// build is one archive file being written to a local temporary file from
// the committed log, before it is published. Invariant: every offset in
// [first, next) is appended to the writer or is a hole in the file.
type build struct {
	cut        cutter
	next       uint64
	file       *os.File
	writer     *parquetfile.Writer
	firstMicro int64 // ingest times of the first and last rows (0: none)
	lastMicro  int64
}

func newBuild(dir string, first uint64, policy CutPolicy, opts parquetfile.WriterOptions) (*build, error) {
	f, err := os.CreateTemp(dir, "building-*.parquet")
	if err != nil {
		return nil, fmt.Errorf("tiering: create a local file to build in: %w", err)
	}
	w, err := parquetfile.NewWriter(f, first, opts)
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &build{cut: cutter{policy: policy, first: first}, next: first, file: f, writer: w}, nil
}

// discard removes the local file (nil-safe).
func (b *build) discard() {
	if b == nil {
		return
	}
	b.file.Close()
	os.Remove(b.file.Name())
}

// extend appends what the log holds from next on, up to committed, and
// returns where the file ends once that is decided (0: not yet). With
// planned > 0 the file ends exactly there (a recorded plan's range);
// otherwise the cut policy decides, at now.
func (b *build) extend(ctx context.Context, log LogSource, committed, planned uint64, now time.Time) (uint64, error) {
	limit := committed
	if planned > 0 {
		limit = min(committed, planned)
	}
	for b.next < limit {
		page, err := log.ReadRaw(ctx, b.next, readPageMessages)
		if err != nil {
			return 0, fmt.Errorf("read the log at %d: %w", b.next, err)
		}
		if err := checkSkipped(page); err != nil {
			return 0, err
		}
		for _, m := range page.Messages {
			if m.Offset >= limit {
				break
			}
			ingest := time.UnixMicro(m.IngestTimeUs)
			if planned == 0 && b.cut.cutBefore(ingest) {
				return m.Offset, nil
			}
			if err := b.append(m); err != nil {
				return 0, err
			}
			if full := b.cut.add(ingest, proto.Size(m)); full && planned == 0 {
				b.next = m.Offset + 1
				return b.next, nil
			}
		}
		if page.NextOffset <= b.next {
			return 0, fmt.Errorf("read the log at %d: no progress", b.next)
		}
		b.next = min(page.NextOffset, limit)
	}
	switch {
	case planned > 0 && b.next >= planned:
		return planned, nil
	case planned == 0 && b.next > b.cut.first && b.next == committed && b.cut.cutAtCommitted(now):
		return committed, nil
	}
	return 0, nil
}

func (b *build) append(m *orderlogpb.StoredMessage) error {
	if err := b.writer.Append(m); err != nil {
		return fmt.Errorf("archive offset %d: %w", m.Offset, err)
	}
	if b.firstMicro == 0 {
		b.firstMicro = m.IngestTimeUs
	}
	b.lastMicro = m.IngestTimeUs
	return nil
}

// checkSkipped refuses a page that skipped anything but holes: the log
// start passed the archived watermark, or a read hid messages.
func checkSkipped(page *orderlogpb.ReadResponse) error {
	for _, s := range page.Skipped {
		if s.Reason != "" {
			return fmt.Errorf("%w: the read skipped [%d, %d) for %q", ErrLogStartPassed, s.First, s.End, s.Reason)
		}
	}
	return nil
}

// finish closes the file at end and syncs it; its footer's meta and size.
func (b *build) finish(end uint64) (parquetfile.Meta, int64, error) {
	meta, err := b.writer.Close(end)
	if err != nil {
		return parquetfile.Meta{}, 0, fmt.Errorf("finish the archive file [%d, %d): %w", b.cut.first, end, err)
	}
	if err := b.file.Sync(); err != nil {
		return parquetfile.Meta{}, 0, fmt.Errorf("sync the archive file: %w", err)
	}
	st, err := b.file.Stat()
	if err != nil {
		return parquetfile.Meta{}, 0, err
	}
	return meta, st.Size(), nil
}
