package tiering

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"orderlog/proto/orderlogpb"
	"orderlog/tiering/parquetfile"
)

// pagedLog is a committed log in a slice (nil: a hole) read in pages of at
// most pageMessages, whatever limit the reader asks for, so that pages end
// anywhere; ReadRaw at failAt fails.
type pagedLog struct {
	messages     []*orderlogpb.StoredMessage
	pageMessages int
	failAt       uint64 // 0: never
}

var errLogRead = errors.New("test: read failed")

func (l *pagedLog) Committed() (uint64, bool) { return uint64(len(l.messages)), true }

func (l *pagedLog) ReadRaw(ctx context.Context, from uint64, limit int) (*orderlogpb.ReadResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if l.failAt != 0 && from >= l.failAt {
		return nil, errLogRead
	}
	page := &orderlogpb.ReadResponse{NextOffset: from, Committed: uint64(len(l.messages))}
	for o := from; o < uint64(len(l.messages)) && len(page.Messages) < min(limit, l.pageMessages); o++ {
		if m := l.messages[o]; m != nil {
			page.Messages = append(page.Messages, m)
		} else if n := len(page.Skipped); n > 0 && page.Skipped[n-1].End == o {
			page.Skipped[n-1].End++
		} else {
			page.Skipped = append(page.Skipped, &orderlogpb.SkippedRange{First: o, End: o + 1})
		}
		page.NextOffset = o + 1
	}
	return page, nil
}

// newPagedLog makes n offsets, every fifth a hole, of messages of ~300
// bytes ingested at ingest(o).
func newPagedLog(n int, ingest func(o uint64) time.Time) *pagedLog {
	l := &pagedLog{messages: make([]*orderlogpb.StoredMessage, n), pageMessages: 37}
	for o := range uint64(n) {
		if o%5 == 2 {
			continue
		}
		l.messages[o] = &orderlogpb.StoredMessage{Offset: o, ProducerId: 1, ProducerSeq: o, IngestTimeUs: ingest(o).UnixMicro(),
			Message: &orderlogpb.Message{Topic: fmt.Sprintf("t%d", o%3), Key: fmt.Appendf(nil, "k%d", o%11), Value: bytes.Repeat([]byte{byte(o)}, 300)}}
	}
	return l
}

// expectedEnds cuts the log's offsets as the cut policy says, one message
// at a time without pages: the files' ends.
func expectedEnds(l *pagedLog, policy CutPolicy) []uint64 {
	var ends []uint64
	var size int64
	var day time.Time
	rows := 0
	for o, m := range l.messages {
		if m == nil {
			continue
		}
		ingest := time.UnixMicro(m.IngestTimeUs).UTC()
		d := time.Date(ingest.Year(), ingest.Month(), ingest.Day(), 0, 0, 0, 0, time.UTC)
		if rows > 0 && d.After(day) {
			ends = append(ends, uint64(o))
			rows, size = 0, 0
		}
		if rows == 0 {
			day = d
		}
		rows++
		if size += int64(proto.Size(m)); size >= policy.FileBytes {
			ends = append(ends, uint64(o)+1)
			rows, size = 0, 0
		}
	}
	return append(ends, uint64(len(l.messages)))
}

// buildAll builds files one after another as the worker does, from 0 to
// C, and returns each file's end and bytes and its build.
func buildAll(t *testing.T, l *pagedLog, policy CutPolicy) ([]uint64, [][]byte, []*build) {
	t.Helper()
	dir := t.TempDir()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // every file old enough
	var ends []uint64
	var files [][]byte
	var builds []*build
	committed, _ := l.Committed()
	for first := uint64(0); first < committed; {
		b, err := newBuild(dir, first, policy, parquetfile.WriterOptions{RowGroupRows: 100}, nil)
		if err != nil {
			t.Fatal(err)
		}
		end, err := b.extend(context.Background(), l, committed, 0, now)
		if err != nil || end == 0 {
			t.Fatalf("extend from %d: end %d, %v", first, end, err)
		}
		if _, _, err := b.finish(end); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(b.file.Name())
		if err != nil {
			t.Fatal(err)
		}
		b.discard()
		ends, files, builds = append(ends, end), append(files, data), append(builds, b)
		first = end
	}
	return ends, files, builds
}

// TestBuildCutsAsThePolicySays: reading ahead in pages that end anywhere,
// files end where the cut policy puts them (size, later UTC day, C), and
// each holds exactly the rows of its range, the same bytes as a Writer
// given them directly.
func TestBuildCutsAsThePolicySays(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	midnight := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	l := newPagedLog(3000, func(o uint64) time.Time {
		return midnight.Add(time.Duration(int64(o)-1500) * time.Second) // crosses midnight at 1500
	})
	policy := CutPolicy{FileBytes: 100 << 10, FileAge: time.Minute}
	ends, files, _ := buildAll(t, l, policy)
	if want := expectedEnds(l, policy); fmt.Sprint(ends) != fmt.Sprint(want) {
		t.Fatalf("files end at %v, want %v", ends, want)
	}
	first := uint64(0)
	for i, end := range ends {
		var want bytes.Buffer
		w, err := parquetfile.NewWriter(&want, first, parquetfile.WriterOptions{RowGroupRows: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range l.messages[first:end] {
			if m != nil {
				if err := w.Append(m); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := w.Close(end); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(files[i], want.Bytes()) {
			t.Errorf("file %d [%d, %d): %d bytes differ from the Writer's %d", i, first, end, len(files[i]), want.Len())
		}
		first = end
	}
}

// TestBuildIngestBounds: a file's ingest-time bounds are the minimum and
// maximum over its rows, not its first and last rows' (ingest nodes'
// clocks differ, so offsets are not in ingest-time order); its first row's
// time (its dt partition) is kept apart; a row of an earlier day than the
// first does not end the file, one of a later day does.
func TestBuildIngestBounds(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	start := time.Date(2026, 12, 3, 0, 0, 0, 500_000_000, time.UTC)
	skew := []time.Duration{0, -3 * time.Second, 2 * time.Second, -time.Second, 500 * time.Millisecond, 3 * time.Second, -2 * time.Second}
	l := newPagedLog(200, func(o uint64) time.Time {
		if o >= 150 {
			return start.Add(24 * time.Hour) // the next day
		}
		return start.Add(time.Duration(o)*time.Millisecond + skew[o%7])
	})
	ends, _, builds := buildAll(t, l, CutPolicy{FileBytes: 1 << 30, FileAge: time.Minute})
	if fmt.Sprint(ends) != "[150 200]" {
		t.Fatalf("files end at %v, want [150 200]", ends)
	}
	b := builds[0]
	var lo, hi int64
	for _, m := range l.messages[:150] {
		if m == nil {
			continue
		}
		if lo == 0 || m.IngestTimeUs < lo {
			lo = m.IngestTimeUs
		}
		hi = max(hi, m.IngestTimeUs)
	}
	first, last := l.messages[0].IngestTimeUs, l.messages[149].IngestTimeUs
	if b.minMicro != lo || b.maxMicro != hi {
		t.Errorf("bounds [%d, %d], want the rows' min and max [%d, %d]", b.minMicro, b.maxMicro, lo, hi)
	}
	if b.firstMicro != first {
		t.Errorf("first row's time %d, want %d", b.firstMicro, first)
	}
	if lo >= first || hi <= last {
		t.Fatalf("the test's rows are in ingest-time order at their ends: min %d first %d, max %d last %d", lo, first, hi, last)
	}
	if day := time.UnixMicro(lo).UTC().Day(); day != 2 {
		t.Fatalf("no row of the day before the first row's (the earliest is on day %d)", day)
	}
}

// TestBuildReadError: a read that fails ends extend with its error and
// stops the read ahead.
func TestBuildReadError(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	l := newPagedLog(1000, func(o uint64) time.Time { return time.Unix(1_800_000_000, 0) })
	l.failAt = 500
	b, err := newBuild(t.TempDir(), 0, CutPolicy{FileBytes: 1 << 30, FileAge: time.Minute}, parquetfile.WriterOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.discard()
	if _, err := b.extend(context.Background(), l, 1000, 0, time.Now()); !errors.Is(err, errLogRead) {
		t.Fatalf("extend: %v, want the read's error", err)
	}
}

// TestBuildStopsReadingAtACut: a cut early in the log stops the read
// ahead after at most the pages it holds; cancelling extend's context ends
// it.
func TestBuildStopsReadingAtACut(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	l := newPagedLog(100_000, func(o uint64) time.Time { return time.Unix(1_800_000_000, 0) })
	counted := &pageCountLog{LogSource: l}
	b, err := newBuild(t.TempDir(), 0, CutPolicy{FileBytes: 10 << 10, FileAge: time.Minute}, parquetfile.WriterOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.discard()
	end, err := b.extend(context.Background(), counted, 100_000, 0, time.Now())
	if err != nil || end == 0 || end > 100 {
		t.Fatalf("extend: end %d, %v; want a cut after ~30 rows", end, err)
	}
	if n := counted.reads.Load(); n > 2+readAheadPages {
		t.Errorf("%d pages read for a file of one page", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b2, err := newBuild(t.TempDir(), 0, CutPolicy{FileBytes: 1 << 30, FileAge: time.Minute}, parquetfile.WriterOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.discard()
	if _, err := b2.extend(ctx, l, 100_000, 0, time.Now()); !errors.Is(err, context.Canceled) {
		t.Fatalf("extend with a cancelled context: %v", err)
	}
}

// TestNextUTCDay: the cutter's day arithmetic agrees with time's calendar.
func TestNextUTCDay(t *testing.T) {
	for _, at := range []time.Time{
		time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 2, 23, 59, 59, 999999000, time.UTC),
		time.Date(2024, 2, 28, 12, 0, 0, 0, time.UTC),
		time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC),
		time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC),
		time.Date(1960, 5, 5, 5, 5, 5, 0, time.UTC),
		time.Unix(0, 0),
	} {
		y, m, d := at.UTC().Date()
		want := time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC).UnixMicro()
		if got := nextUTCDay(at.UnixMicro()); got != want {
			t.Errorf("nextUTCDay(%v) = %v, want %v", at, time.UnixMicro(got).UTC(), time.UnixMicro(want).UTC())
		}
	}
	if got := nextUTCDay(1<<63 - 1); got != 1<<63-1 {
		t.Errorf("nextUTCDay(max) = %d", got)
	}
}

// pageCountLog counts the pages read.
type pageCountLog struct {
	LogSource
	reads atomic.Int64
}

func (l *pageCountLog) ReadRaw(ctx context.Context, from uint64, limit int) (*orderlogpb.ReadResponse, error) {
	l.reads.Add(1)
	return l.LogSource.ReadRaw(ctx, from, limit)
}
