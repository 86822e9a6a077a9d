package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"orderlog/client"
	"orderlog/ingest/retention"
	"orderlog/proto/orderlogpb"
	"orderlog/tiering"
	"orderlog/tiering/objstore"
	"orderlog/tiering/parquetfile"
)

// verifyProblem is one mismatch verify found, named by the manifest
// segment and the object it concerns.
type verifyProblem struct {
	Segment string `json:"segment,omitempty"`
	Object  string `json:"object,omitempty"`
	Problem string `json:"problem"`
}

func (p verifyProblem) String() string {
	switch {
	case p.Segment != "" && p.Object != "":
		return fmt.Sprintf("%s (%s): %s", p.Object, p.Segment, p.Problem)
	case p.Segment != "":
		return p.Segment + ": " + p.Problem
	case p.Object != "":
		return p.Object + ": " + p.Problem
	}
	return p.Problem
}

// verifySummary is what verify prints at the end (--json: this object).
type verifySummary struct {
	Archive string `json:"archive"`
	Files   int    `json:"files"`
	Rows    int64  `json:"rows"`
	Bytes   int64  `json:"bytes"`
	First   uint64 `json:"first"`
	End     uint64 `json:"end"`
	// With --etcd: the head's T, and the files published past it (their
	// segment written, T not moved yet).
	T        *uint64 `json:"t,omitempty"`
	PastT    int     `json:"files_past_t"`
	Unlisted int     `json:"objects_without_segment"`
	LogStart *uint64 `json:"log_start,omitempty"`
	// With --grpc: the files compared with the log, their messages, and
	// the offsets the log hides from reads (a topic's retention) that the
	// archive keeps; files below the log start are not compared.
	ComparedFiles    int             `json:"compared_files"`
	ComparedMessages int64           `json:"compared_messages"`
	HiddenOffsets    uint64          `json:"hidden_offsets"`
	BelowLogStart    int             `json:"files_below_log_start"`
	Problems         []verifyProblem `json:"problems"`
	OK               bool            `json:"ok"`
	Seconds          float64         `json:"seconds"`
}

// verifier runs one verify and collects what it finds.
type verifier struct {
	s        *archiveSession
	log      *client.Client // nil without --grpc
	progress int            // a line on stderr every this many files (0: none)
	sum      verifySummary
}

func runArchiveVerify(args []string) error {
	fs := newFlagSet("archive verify", "archive verify --archive URL [--etcd host:port,... [--grpc host:port,...]] [flags]\n\n"+
		"Re-reads every archive file and checks: its manifest segment decodes and is\n"+
		"named for its range; the files' ranges follow each other from the first\n"+
		"without gap or overlap; the object exists with the segment's size; its footer\n"+
		"says the segment's range, rows, holes and digest; its row groups' offset ranges\n"+
		"increase without overlap; its rows give the footer's digest; its first and\n"+
		"last rows' ingest times are the segment's, and dt is the first's UTC date.\n"+
		"With --etcd: the head's first, T, file, row and byte counts and newest\n"+
		"segment agree with the manifest. With --grpc (and --etcd, for the log start):\n"+
		"each file at or above the log start reads the same from the log (every\n"+
		"message proto.Equal, the same holes).\n\n"+
		"Mismatches go to stderr as found, with progress lines; the summary to\n"+
		"stdout. Exit status 1 on any mismatch.")
	var f archiveCmdFlags
	f.register(fs)
	grpcAddr := fs.String("grpc", "", "gRPC address of an orderlog node (`host:port,...`): compare the files above the log start with the log (needs --etcd)")
	from := fs.Uint64("from", 0, "start at the file holding this offset (the head's totals are then not checked)")
	progressEvery := fs.Int("progress", 100, "print a progress line on stderr every this many files (0: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *grpcAddr != "" && f.etcd == "" {
		return errors.New("--grpc needs --etcd: the log start says which files the log still holds")
	}
	return f.open(func(s *archiveSession) error {
		v := &verifier{s: s, progress: *progressEvery}
		v.sum.Archive = s.store.Describe()
		if *grpcAddr != "" {
			var opts []client.Option
			if s.tls != nil {
				opts = append(opts, client.WithTLS(s.tls.ClientConfig()))
			}
			cl, err := client.Dial(*grpcAddr, opts...)
			if err != nil {
				return err
			}
			defer cl.Close()
			v.log = cl
		}
		start := time.Now()
		if err := v.run(*from); err != nil {
			return err
		}
		v.sum.Seconds = time.Since(start).Seconds()
		return v.report(f.json)
	})
}

// run checks the archive from the file holding from on.
func (v *verifier) run(from uint64) error {
	var head tiering.Head
	if v.s.etcd != nil {
		// The head before the listing: every segment below its T is listed.
		var err error
		if head, err = v.s.readHead(); err != nil {
			return err
		}
		v.sum.T = &head.T
	}
	all, bad, err := loadManifest(v.s.ctx, v.s.store)
	if err != nil {
		return err
	}
	for _, b := range bad {
		v.problem(verifyProblem{Segment: b.segment, Problem: b.err.Error()})
	}
	if err := v.noteUnlisted(all); err != nil {
		return err
	}
	files := filesFrom(all, from)
	v.checkLayout(files)
	if v.s.etcd != nil {
		v.checkHead(head, files, from == 0 && len(bad) == 0)
		if err := v.readLogStart(); err != nil {
			return err
		}
	}
	for i, file := range files {
		if err := v.s.ctx.Err(); err != nil {
			return err
		}
		v.checkFile(file)
		if v.progress > 0 && (i+1)%v.progress == 0 {
			fmt.Fprintf(os.Stderr, "orderlog archive verify: %d/%d files, %d rows, %d bytes, %d problems\n",
				i+1, len(files), v.sum.Rows, v.sum.Bytes, len(v.sum.Problems))
		}
	}
	if len(files) > 0 {
		v.sum.First, v.sum.End = files[0].entry.First, files[len(files)-1].entry.End
	}
	return nil
}

// problem records a mismatch and prints it at once.
func (v *verifier) problem(p verifyProblem) {
	v.sum.Problems = append(v.sum.Problems, p)
	fmt.Fprintf(os.Stderr, "orderlog archive verify: MISMATCH %s\n", p)
}

func (v *verifier) fileProblem(file archivedFile, format string, args ...any) {
	v.problem(verifyProblem{Segment: file.segment, Object: file.entry.Object, Problem: fmt.Sprintf(format, args...)})
}

// report prints the summary; an error when anything mismatched.
func (v *verifier) report(asJSON bool) error {
	sum := &v.sum
	sum.OK = len(sum.Problems) == 0
	if sum.Problems == nil {
		sum.Problems = []verifyProblem{}
	}
	if asJSON {
		if err := json.NewEncoder(os.Stdout).Encode(sum); err != nil {
			return err
		}
	} else {
		v.printSummary()
	}
	if !sum.OK {
		return fmt.Errorf("%d mismatches; the first: %s", len(sum.Problems), sum.Problems[0])
	}
	return nil
}

func (v *verifier) printSummary() {
	sum := &v.sum
	fmt.Printf("verified %d files of %s in %.1f s: %d rows, %d bytes, offsets [%d, %d)\n",
		sum.Files, sum.Archive, sum.Seconds, sum.Rows, sum.Bytes, sum.First, sum.End)
	if sum.T != nil {
		fmt.Printf("etcd head: T %d; %d files published past T\n", *sum.T, sum.PastT)
	}
	if sum.Unlisted > 0 {
		fmt.Printf("%d objects under dt= that no manifest segment names (an upload whose segment is not written yet, or left over)\n", sum.Unlisted)
	}
	if v.log != nil {
		fmt.Printf("compared with the log above its start %d: %d files, %d messages, %d offsets the log hides from reads; %d files below the log start\n",
			*sum.LogStart, sum.ComparedFiles, sum.ComparedMessages, sum.HiddenOffsets, sum.BelowLogStart)
	}
	if len(sum.Problems) == 0 {
		fmt.Println("OK")
	} else {
		fmt.Printf("%d MISMATCHES\n", len(sum.Problems))
	}
}

// checkLayout checks what the manifest alone says: each segment is named
// for its range, each object key is the format's for it, and the files
// follow each other without gap or overlap.
func (v *verifier) checkLayout(files []archivedFile) {
	for i, file := range files {
		e := file.entry
		if want := path.Join(tiering.ManifestDir, fmt.Sprintf("%020d-%020d.json", e.First, e.End-1)); file.segment != want {
			v.fileProblem(file, "the segment holds [%d, %d), which is segment %s", e.First, e.End, want)
		}
		if want := fmt.Sprintf("%020d-%020d.parquet", e.First, e.End-1); path.Base(e.Object) != want {
			v.fileProblem(file, "the object's name is not %s, the format's for [%d, %d)", want, e.First, e.End)
		}
		if dt, day := objectDT(e.Object), ingestDay(e.FirstIngestMicros); e.Rows > 0 && dt != day {
			v.fileProblem(file, "dt=%s, but the first row was ingested on %s (UTC)", dt, day)
		}
		if i == 0 {
			continue
		}
		prev := files[i-1]
		switch {
		case e.First < prev.entry.End:
			v.fileProblem(file, "starts at %d, inside the file before it, %s [%d, %d)", e.First, prev.segment, prev.entry.First, prev.entry.End)
		case e.First > prev.entry.End:
			v.fileProblem(file, "starts at %d, but the file before it, %s, ends at %d: [%d, %d) is in no file",
				e.First, prev.segment, prev.entry.End, prev.entry.End, e.First)
		}
	}
}

func ingestDay(micros int64) string { return time.UnixMicro(micros).UTC().Format(time.DateOnly) }

// checkHead compares the head in etcd with the manifest: the files below
// T run from the head's first to T and are the ones it counts (totals
// only when every file was listed and decoded).
func (v *verifier) checkHead(head tiering.Head, files []archivedFile, totals bool) {
	var below []archivedFile
	for _, f := range files {
		if f.entry.End <= head.T {
			below = append(below, f)
		} else {
			v.sum.PastT++
		}
	}
	headProblem := func(format string, args ...any) {
		v.problem(verifyProblem{Segment: head.LastManifest, Problem: "etcd head: " + fmt.Sprintf(format, args...)})
	}
	switch {
	case head.ModRevision == 0 && len(files) > 0:
		headProblem("none in etcd, but the archive has %d files (another cluster's etcd?)", len(files))
		return
	case head.T > head.First && len(below) == 0 && totals:
		headProblem("T is %d, but no file ends at or below it", head.T)
		return
	case len(below) == 0:
		return
	}
	last := below[len(below)-1]
	if last.entry.End != head.T {
		headProblem("T is %d, but the files below it end at %d (%s)", head.T, last.entry.End, last.segment)
	}
	if last.segment != head.LastManifest {
		headProblem("names %q as the newest segment; the file ending at T is %s", head.LastManifest, last.segment)
	}
	if !totals {
		return
	}
	if below[0].entry.First != head.First {
		headProblem("the archive's first offset is %d, but the first file, %s, starts at %d", head.First, below[0].segment, below[0].entry.First)
	}
	var rows, bytes int64
	for _, f := range below {
		rows += f.entry.Rows
		bytes += f.entry.Bytes
	}
	if int64(len(below)) != head.Files || rows != head.Rows || bytes != head.Bytes {
		headProblem("counts %d files, %d rows, %d bytes; the manifest below T has %d, %d, %d",
			head.Files, head.Rows, head.Bytes, len(below), rows, bytes)
	}
}

// readLogStart reads the log start from etcd (absent: 0).
func (v *verifier) readLogStart() error {
	ctx, cancel := context.WithTimeout(v.s.ctx, etcdCallTimeout)
	defer cancel()
	start, _, err := retention.ReadStart(ctx, v.s.etcd)
	if err != nil {
		return err
	}
	v.sum.LogStart = &start
	return nil
}

// noteUnlisted counts the objects under dt= that no segment names.
func (v *verifier) noteUnlisted(files []archivedFile) error {
	objects, err := v.s.store.List(v.s.ctx, "dt=")
	if err != nil {
		return fmt.Errorf("list the archive's objects: %w", err)
	}
	named := make(map[string]bool, len(files))
	for _, f := range files {
		named[f.entry.Object] = true
	}
	for _, o := range objects {
		if !named[o.Key] {
			v.sum.Unlisted++
			fmt.Fprintf(os.Stderr, "orderlog archive verify: note: no manifest segment names %s\n", o.Key)
		}
	}
	return nil
}

// checkFile re-reads one file and, above the log start, compares it with
// the log. A file's first problem ends its checks.
func (v *verifier) checkFile(file archivedFile) {
	e := file.entry
	v.sum.Files++
	v.sum.Rows += e.Rows
	v.sum.Bytes += e.Bytes
	f, ok := v.openFile(file)
	if !ok || !v.checkFooter(file, f) || !v.checkRows(file, f) {
		return
	}
	if v.log == nil {
		return
	}
	if e.First < *v.sum.LogStart {
		v.sum.BelowLogStart++
		return
	}
	v.compareWithLog(file, f)
}

// openFile opens the file's object after checking its size.
func (v *verifier) openFile(file archivedFile) (*parquetfile.File, bool) {
	e := file.entry
	size, err := v.s.store.Size(v.s.ctx, e.Object)
	if err != nil {
		v.fileProblem(file, "%v", err)
		return nil, false
	}
	if size != e.Bytes {
		v.fileProblem(file, "the object has %d bytes, the segment says %d", size, e.Bytes)
		return nil, false
	}
	f, err := parquetfile.Open(newObjectReaderAt(v.s.ctx, v.s.store, e.Object, size), size, parquetfile.WithKeys(v.s.keys))
	if err != nil {
		v.fileProblem(file, "%v", err)
		return nil, false
	}
	return f, true
}

// checkFooter compares the footer with the segment, and checks that the
// row groups' offset ranges increase without overlap.
func (v *verifier) checkFooter(file archivedFile, f *parquetfile.File) bool {
	e, m := file.entry, f.Meta()
	holes := make([]parquetfile.Range, len(e.Holes))
	for i, h := range e.Holes {
		holes[i] = parquetfile.Range{First: h.First, End: h.End}
	}
	var differ []string
	note := func(what string, footer, segment any) {
		differ = append(differ, fmt.Sprintf("%s %v in the footer, %v in the segment", what, footer, segment))
	}
	if m.First != e.First || m.End != e.End {
		note("range", fmt.Sprintf("[%d, %d)", m.First, m.End), fmt.Sprintf("[%d, %d)", e.First, e.End))
	}
	if m.Rows != e.Rows {
		note("rows", m.Rows, e.Rows)
	}
	if !slices.Equal(m.Holes, holes) {
		note("holes", m.Holes, holes)
	}
	if m.Digest != e.Digest {
		note("digest", m.Digest, e.Digest)
	}
	if len(differ) > 0 {
		v.fileProblem(file, "%s", strings.Join(differ, "; "))
		return false
	}
	prevEnd := e.First
	for i, g := range f.RowGroups() {
		if g.First < prevEnd || g.End <= g.First || g.End > e.End {
			v.fileProblem(file, "row group %d holds [%d, %d): not after the one before it (ending at %d) or outside [%d, %d)",
				i, g.First, g.End, prevEnd, e.First, e.End)
			return false
		}
		prevEnd = g.End
	}
	return true
}

// checkRows reads every row: their offsets and digest against the footer
// (File.VerifyEach), and their least and greatest ingest times against the
// segment's bounds (rows from several ingest nodes are not in ingest-time
// order, so the bounds are not the first and last rows' times).
func (v *verifier) checkRows(file archivedFile, f *parquetfile.File) bool {
	e := file.entry
	var rows int
	var least, greatest, first, last int64
	err := f.VerifyEach(v.s.ctx, func(m *orderlogpb.StoredMessage) {
		if rows == 0 {
			first = m.IngestTimeUs
		}
		last = m.IngestTimeUs
		if rows == 0 || m.IngestTimeUs < least {
			least = m.IngestTimeUs
		}
		if rows == 0 || m.IngestTimeUs > greatest {
			greatest = m.IngestTimeUs
		}
		rows++
	})
	if err != nil {
		v.fileProblem(file, "%v", err)
		return false
	}
	// A segment written before the bounds were the least and greatest
	// times holds the first and last rows' times: accepted as what that
	// version wrote.
	asNow := least == e.FirstIngestMicros && greatest == e.LastIngestMicros
	asBefore := first == e.FirstIngestMicros && last == e.LastIngestMicros
	if !asNow && !asBefore {
		v.fileProblem(file, "the rows were ingested in [%d, %d] µs, the segment says [%d, %d]", least, greatest, e.FirstIngestMicros, e.LastIngestMicros)
		return false
	}
	return true
}

// objectReaderAt is an io.ReaderAt over an object, read in blocks through
// Store.GetRange and kept in a small cache: parquetfile reads each column
// chunk in steps of 16 KiB, a request each without the cache (costly on
// S3), and its columns interleave, so a few blocks per column stay.
type objectReaderAt struct {
	ctx   context.Context
	store objstore.Store
	key   string
	size  int64

	mu struct {
		sync.Mutex
		blocks map[int64][]byte
		used   []int64 // block indices, least recently used first
	}
}

const (
	verifyBlockBytes  = 1 << 20
	verifyCacheBlocks = 32
)

func newObjectReaderAt(ctx context.Context, store objstore.Store, key string, size int64) *objectReaderAt {
	r := &objectReaderAt{ctx: ctx, store: store, key: key, size: size}
	r.mu.blocks = make(map[int64][]byte)
	return r
}

func (r *objectReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s at %d", r.key, off)
	}
	n := 0
	for n < len(p) && off+int64(n) < r.size {
		at := off + int64(n)
		block, err := r.block(at / verifyBlockBytes)
		if err != nil {
			return n, err
		}
		n += copy(p[n:], block[at%verifyBlockBytes:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// block returns block i of the object, from the cache or the store.
func (r *objectReaderAt) block(i int64) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.mu.blocks[i]; ok {
		r.touchLocked(i)
		return b, nil
	}
	off := i * verifyBlockBytes
	b, err := r.store.GetRange(r.ctx, r.key, off, min(verifyBlockBytes, r.size-off))
	if err != nil {
		return nil, err
	}
	if len(r.mu.used) == verifyCacheBlocks {
		delete(r.mu.blocks, r.mu.used[0])
		r.mu.used = r.mu.used[1:]
	}
	r.mu.blocks[i] = b
	r.mu.used = append(r.mu.used, i)
	return b, nil
}

func (r *objectReaderAt) touchLocked(i int64) {
	at := slices.Index(r.mu.used, i)
	r.mu.used = append(slices.Delete(r.mu.used, at, at+1), i)
}
