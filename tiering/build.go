package tiering

import (
	"context"
	"fmt"
	"os"
	"time"

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

// build is one archive file being written to a local temporary file from
// the committed log, before it is published. Invariant: every offset in
// [first, next) is appended to the writer or is a hole in the file.
type build struct {
	cut    cutter
	next   uint64
	file   *os.File
	writer *parquetfile.Writer
	// firstMicro is the ingest time of the first row in offset order (0:
	// no row); it names the file's dt partition.
	firstMicro int64
	// minMicro and maxMicro bound the rows' ingest times (0: no row):
	// offsets are not in ingest-time order (several ingest nodes, their
	// clocks), so a later row may have been ingested earlier. Time-range
	// queries skip files by these (the manifest's).
	minMicro, maxMicro int64
	// schemas resolves the rows' schema_version (nil: all null).
	schemas *fileSchemas
}

func newBuild(dir string, first uint64, policy CutPolicy, opts parquetfile.WriterOptions, schemas *fileSchemas) (*build, error) {
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
	return &build{cut: cutter{policy: policy, first: first}, next: first, file: f, writer: w, schemas: schemas}, nil
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
// otherwise the cut policy decides, at now. The log is read ahead on
// another goroutine (readAhead) while the pages before are appended.
func (b *build) extend(ctx context.Context, log LogSource, committed, planned uint64, now time.Time) (uint64, error) {
	limit := committed
	if planned > 0 {
		limit = min(committed, planned)
	}
	if b.next < limit {
		pages := startReadAhead(ctx, log, b.next, limit)
		defer pages.stop()
		for b.next < limit {
			end, err := b.appendPage(ctx, pages, planned)
			if err != nil || end > 0 {
				return end, err
			}
		}
	}
	switch {
	case planned > 0 && b.next >= planned:
		return planned, nil
	case planned == 0 && b.next > b.cut.first && b.next == committed && b.cut.cutAtCommitted(now):
		return committed, nil
	}
	return 0, nil
}

// appendPage appends the next page's messages below the read's limit and
// moves next past the page; it returns where the file ends if the cut
// policy ends it in the page (never with planned > 0).
func (b *build) appendPage(ctx context.Context, pages *readAhead, planned uint64) (uint64, error) {
	p, err := pages.next()
	switch {
	case err != nil:
		return 0, fmt.Errorf("read the log at %d: %w", b.next, err)
	case p.err != nil:
		return 0, fmt.Errorf("read the log at %d: %w", p.from, p.err)
	case p.from != b.next:
		return 0, fmt.Errorf("read the log at %d: got the page at %d", b.next, p.from)
	}
	if err := checkSkipped(p.page); err != nil {
		return 0, err
	}
	for i, size := range p.sizes {
		m := p.page.Messages[i]
		if planned == 0 && b.cut.cutBefore(m.IngestTimeUs) {
			return m.Offset, nil
		}
		if err := b.append(ctx, m); err != nil {
			return 0, err
		}
		if full := b.cut.add(m.IngestTimeUs, size); full && planned == 0 {
			b.next = m.Offset + 1
			return b.next, nil
		}
	}
	if p.page.NextOffset <= b.next {
		return 0, fmt.Errorf("read the log at %d: no progress", b.next)
	}
	b.next = min(p.page.NextOffset, pages.limit)
	return 0, nil
}

func (b *build) append(ctx context.Context, m *orderlogpb.StoredMessage) error {
	version, err := b.schemas.version(ctx, m.GetMessage().GetTopic(), m.GetMessage().GetSchemaId())
	if err != nil {
		return fmt.Errorf("archive offset %d: %w", m.Offset, err)
	}
	if err := b.writer.AppendVersioned(m, version); err != nil {
		return fmt.Errorf("archive offset %d: %w", m.Offset, err)
	}
	t := m.IngestTimeUs
	if b.cut.rows == 0 {
		b.firstMicro, b.minMicro, b.maxMicro = t, t, t
	}
	b.minMicro, b.maxMicro = min(b.minMicro, t), max(b.maxMicro, t)
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

// finish closes the file at end; its footer's meta and size. The local
// file is not synced: a crash loses it and the next term builds it again,
// and the store makes the object durable (the file store syncs the file it
// links or the copy it stages; S3 has its own).
func (b *build) finish(end uint64) (parquetfile.Meta, int64, error) {
	meta, err := b.writer.Close(end)
	if err != nil {
		return parquetfile.Meta{}, 0, fmt.Errorf("finish the archive file [%d, %d): %w", b.cut.first, end, err)
	}
	st, err := b.file.Stat()
	if err != nil {
		return parquetfile.Meta{}, 0, err
	}
	return meta, st.Size(), nil
}
