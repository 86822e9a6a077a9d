package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"orderlog/internal/tlsconfig"
	"orderlog/tiering"
	"orderlog/tiering/objstore"
	"orderlog/tiering/parquetfile"
)

// `orderlog archive` inspects the Parquet archive the tiering worker
// writes (docs/format/archive.md): what the object store and etcd say it
// holds (status), its files (ls), and whether every file is what its
// manifest segment, its footer and the log say (verify). It only reads.

const archiveUsage = `archive status|ls|verify --archive URL [flags] | archive key --encryption-key-file FILE

Inspects the Parquet archive (docs/format/archive.md). It only reads.

  status   what the archive holds: files, rows, bytes, offsets, holes, the
           newest file; with --etcd also the head (T, first, files, newest
           manifest segment)
  ls       one line per file, from the manifest, in offset order
  verify   re-reads every file and checks it against its manifest segment,
           its footer, its neighbours and its own rows (digest); with --etcd
           against the head, with --grpc against the log where it still holds
           the file's range. Exit status 1 on any mismatch. Encrypted files
           need --encryption-key-file.
  key      the archive key derived from an encryption key file, base64, for
           DuckDB's PRAGMA add_parquet_key

Run orderlog archive <verb> --help for a verb's flags.`

var archiveVerbs = map[string]func(args []string) error{
	"status": runArchiveStatus,
	"ls":     runArchiveLs,
	"verify": runArchiveVerify,
	"key":    runArchiveKey,
}

func runArchive(args []string) error {
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprintf(os.Stdout, "Usage: orderlog %s\n", archiveUsage)
		if len(args) == 0 {
			return fmt.Errorf("want a verb: status, ls, verify or key")
		}
		return nil
	}
	verb, ok := archiveVerbs[args[0]]
	if !ok {
		return fmt.Errorf("unknown verb %q: want status, ls, verify or key", args[0])
	}
	return verb(args[1:])
}

// archiveCmdFlags are the flags every archive verb takes.
type archiveCmdFlags struct {
	url      string
	endpoint string
	region   string
	etcd     string
	json     bool
	// keyFile is the nodes' --encryption-key-file: verify decrypts
	// encrypted files with the archive keys derived from it.
	keyFile string
	// tls secures the connections to etcd (and to a node: verify --grpc).
	tls tlsconfig.Config
}

func (f *archiveCmdFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "archive", "", "the archive: file://PATH or s3://BUCKET/PREFIX (required)")
	fs.StringVar(&f.endpoint, "s3-endpoint", "", s3EndpointHelp)
	fs.StringVar(&f.region, "s3-region", "", s3RegionHelp)
	fs.StringVar(&f.etcd, "etcd", "", "the cluster's etcd (`host:port,...`): also read the archive's head there (and, for verify, the log start)")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of text")
	fs.StringVar(&f.keyFile, "encryption-key-file", "", "the nodes' encryption key file: decrypt encrypted archive files (verify)")
	fs.StringVar(&f.tls.CAFile, "tls-ca", "", "PEM CA certificate(s) that etcd's (and the node's) certificates chain to: connect over TLS")
	fs.StringVar(&f.tls.CertFile, "tls-cert", "", "PEM client certificate for etcd (which asks for one from the cluster CA) and the node, with --tls-key")
	fs.StringVar(&f.tls.KeyFile, "tls-key", "", "PEM private key of --tls-cert")
}

// tlsSource loads the TLS files (nil without any).
func (f *archiveCmdFlags) tlsSource() (*tlsconfig.Source, error) {
	if !f.tls.Enabled() {
		return nil, nil
	}
	return tlsconfig.Load(f.tls)
}

// archiveSession is what a verb works with: the store, an etcd client
// when --etcd was given (nil otherwise), and a context that ends on
// Ctrl-C or SIGTERM.
type archiveSession struct {
	ctx   context.Context
	store objstore.Store
	etcd  *clientv3.Client
	tls   *tlsconfig.Source // nil: plaintext
	keys  *parquetfile.Keys // nil without --encryption-key-file
}

// etcdCallTimeout bounds each etcd call: an unreachable --etcd fails
// rather than hangs.
const etcdCallTimeout = 10 * time.Second

// open runs fn with the store and, with --etcd, an etcd client.
func (f *archiveCmdFlags) open(fn func(s *archiveSession) error) error {
	if f.url == "" {
		return fmt.Errorf("--archive is required (file://PATH or s3://BUCKET/PREFIX)")
	}
	if !strings.HasPrefix(f.url, "file://") && !strings.HasPrefix(f.url, "s3://") {
		return fmt.Errorf("--archive %q: want file://PATH or s3://BUCKET/PREFIX", f.url)
	}
	if dir, ok := strings.CutPrefix(f.url, "file://"); ok {
		// objstore.Open creates a missing directory: a mistyped path
		// must not leave an empty archive behind.
		if info, err := os.Stat(dir); err != nil || !info.IsDir() {
			return fmt.Errorf("--archive %s: no archive directory there", f.url)
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	store, err := objstore.Open(ctx, f.url, objstore.Options{Endpoint: f.endpoint, Region: f.region})
	if err != nil {
		return err
	}
	s := &archiveSession{ctx: ctx, store: store}
	if s.tls, err = f.tlsSource(); err != nil {
		return err
	}
	if f.keyFile != "" {
		if s.keys, err = tiering.LoadArchiveKeys(f.keyFile); err != nil {
			return err
		}
	}
	if f.etcd != "" {
		cfg := clientv3.Config{Endpoints: strings.Split(f.etcd, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
		if s.tls != nil {
			cfg.TLS = s.tls.ClientConfig()
		}
		s.etcd, err = clientv3.New(cfg)
		if err != nil {
			return fmt.Errorf("etcd %s: %w", f.etcd, err)
		}
		defer s.etcd.Close()
	}
	return fn(s)
}

// readHead reads the archive's head from etcd.
func (s *archiveSession) readHead() (tiering.Head, error) {
	ctx, cancel := context.WithTimeout(s.ctx, etcdCallTimeout)
	defer cancel()
	return tiering.ReadHead(ctx, s.etcd)
}

// archivedFile is one manifest segment: its key and the entry it holds.
type archivedFile struct {
	segment string
	entry   tiering.ManifestEntry
}

// badSegment is a manifest segment that could not be read or decoded.
type badSegment struct {
	segment string
	err     error
}

// manifestLoadParallel is how many segments are fetched at once: S3
// answers each GET in tens of milliseconds.
const manifestLoadParallel = 16

// loadManifest lists and decodes every manifest segment, and returns the
// files in offset order and the segments that failed.
func loadManifest(ctx context.Context, store objstore.Store) ([]archivedFile, []badSegment, error) {
	objects, err := store.List(ctx, tiering.ManifestDir+"/")
	if err != nil {
		return nil, nil, fmt.Errorf("list the manifest: %w", err)
	}
	var keys []string
	for _, o := range objects {
		if strings.HasSuffix(o.Key, ".json") {
			keys = append(keys, o.Key)
		}
	}
	files := make([]archivedFile, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	slots := make(chan struct{}, manifestLoadParallel)
	for i, key := range keys {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			files[i].segment = key
			raw, err := store.Get(ctx, key)
			if err == nil {
				files[i].entry, err = tiering.DecodeManifest(raw)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	var good []archivedFile
	var bad []badSegment
	for i := range files {
		if errs[i] != nil {
			bad = append(bad, badSegment{keys[i], errs[i]})
			continue
		}
		good = append(good, files[i])
	}
	sort.SliceStable(good, func(i, j int) bool { return good[i].entry.First < good[j].entry.First })
	return good, bad, nil
}

// loadManifestStrict is loadManifest for status and ls: a bad segment is
// an error (verify reports them all).
func loadManifestStrict(ctx context.Context, store objstore.Store) ([]archivedFile, error) {
	files, bad, err := loadManifest(ctx, store)
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("manifest segment %s: %v (%d bad segments; run orderlog archive verify)", bad[0].segment, bad[0].err, len(bad))
	}
	return files, nil
}

// holeOffsets is the number of offsets in e's holes.
func holeOffsets(e tiering.ManifestEntry) uint64 {
	var n uint64
	for _, h := range e.Holes {
		n += h.End - h.First
	}
	return n
}

// objectDT is the dt partition of an archive object's key ("" if none).
func objectDT(object string) string {
	dir := path.Base(path.Dir(object))
	dt, ok := strings.CutPrefix(dir, "dt=")
	if !ok {
		return ""
	}
	return dt
}

// archiveStatus is what status prints (--json: this object).
type archiveStatus struct {
	Archive     string `json:"archive"`
	Files       int    `json:"files"`
	Rows        int64  `json:"rows"`
	Bytes       int64  `json:"bytes"`
	First       uint64 `json:"first"`
	Last        uint64 `json:"last"` // the last file's last offset (end - 1); 0 with no file
	End         uint64 `json:"end"`
	HoleRanges  int    `json:"hole_ranges"`
	HoleOffsets uint64 `json:"hole_offsets"`
	// Gaps counts places where a file does not start where the one before
	// it ends (verify says which).
	Gaps       int         `json:"gaps"`
	NewestFile string      `json:"newest_file,omitempty"`
	NewestDT   string      `json:"newest_dt,omitempty"`
	Head       *headStatus `json:"etcd_head,omitempty"`
}

// headStatus is the head in etcd (keys.TieringHead).
type headStatus struct {
	T            uint64 `json:"t"`
	First        uint64 `json:"first"`
	Files        int64  `json:"files"`
	Rows         int64  `json:"rows"`
	Bytes        int64  `json:"bytes"`
	LastManifest string `json:"last_manifest"`
	Exists       bool   `json:"exists"`
}

func runArchiveStatus(args []string) error {
	fs := newFlagSet("archive status", "archive status --archive URL [--etcd host:port,...] [flags]\n\nPrints what the archive holds, from its manifest: files, rows, bytes, first and\nlast offset, holes, the newest file and its dt; with --etcd also the head: the\narchived watermark T (every offset below it is archived), the archive's first\noffset, its file count and the newest manifest segment.")
	var f archiveCmdFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	return f.open(func(s *archiveSession) error {
		var st archiveStatus
		st.Archive = s.store.Describe()
		if s.etcd != nil {
			// The head first: every segment below its T is then listed.
			head, err := s.readHead()
			if err != nil {
				return err
			}
			st.Head = &headStatus{T: head.T, First: head.First, Files: head.Files, Rows: head.Rows, Bytes: head.Bytes,
				LastManifest: head.LastManifest, Exists: head.ModRevision != 0}
		}
		files, err := loadManifestStrict(s.ctx, s.store)
		if err != nil {
			return err
		}
		st.summarize(files)
		if f.json {
			return json.NewEncoder(os.Stdout).Encode(st)
		}
		st.print()
		return nil
	})
}

func (st *archiveStatus) summarize(files []archivedFile) {
	st.Files = len(files)
	for i, file := range files {
		e := file.entry
		st.Rows += e.Rows
		st.Bytes += e.Bytes
		st.HoleRanges += len(e.Holes)
		st.HoleOffsets += holeOffsets(e)
		if i > 0 && e.First != files[i-1].entry.End {
			st.Gaps++
		}
	}
	if len(files) == 0 {
		return
	}
	newest := files[len(files)-1].entry
	st.First, st.End, st.Last = files[0].entry.First, newest.End, newest.End-1
	st.NewestFile, st.NewestDT = newest.Object, objectDT(newest.Object)
}

func (st *archiveStatus) print() {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "archive\t%s\n", st.Archive)
	if h := st.Head; h != nil {
		if !h.Exists {
			fmt.Fprintf(w, "T\tnone (etcd has no archive head: the tiering worker has not started)\n")
		} else {
			fmt.Fprintf(w, "T\t%d  (etcd: every offset in [first, T) is archived)\n", h.T)
			fmt.Fprintf(w, "head first\t%d\n", h.First)
			fmt.Fprintf(w, "head files\t%d  (%d rows, %d bytes)\n", h.Files, h.Rows, h.Bytes)
			fmt.Fprintf(w, "newest manifest\t%s\n", h.LastManifest)
		}
	}
	fmt.Fprintf(w, "files\t%d\n", st.Files)
	if st.Files > 0 {
		fmt.Fprintf(w, "rows\t%d\n", st.Rows)
		fmt.Fprintf(w, "bytes\t%d\n", st.Bytes)
		fmt.Fprintf(w, "first offset\t%d\n", st.First)
		fmt.Fprintf(w, "last offset\t%d\n", st.Last)
		fmt.Fprintf(w, "holes\t%d ranges, %d offsets\n", st.HoleRanges, st.HoleOffsets)
		fmt.Fprintf(w, "newest file\t%s  (dt %s)\n", st.NewestFile, st.NewestDT)
	}
	if st.Gaps > 0 {
		fmt.Fprintf(w, "gaps\t%d  (files that do not start where the one before ends: run orderlog archive verify)\n", st.Gaps)
	}
	w.Flush()
}

// lsEntry is one line of ls --json.
type lsEntry struct {
	First       uint64      `json:"first"`
	End         uint64      `json:"end"`
	Rows        int64       `json:"rows"`
	HoleOffsets uint64      `json:"hole_offsets"`
	Holes       [][2]uint64 `json:"holes"`
	Bytes       int64       `json:"bytes"`
	Object      string      `json:"object"`
	Segment     string      `json:"segment"`
	Digest      string      `json:"digest"`
}

func runArchiveLs(args []string) error {
	fs := newFlagSet("archive ls", "archive ls --archive URL [--from OFFSET] [flags]\n\nPrints one line per archive file, from the manifest, in offset order: its\nrange [first, end), rows, hole offsets (rows + holes = end - first), bytes and\nobject key. --json prints one JSON object per line, with the holes.")
	var f archiveCmdFlags
	f.register(fs)
	from := fs.Uint64("from", 0, "start at the file holding this offset")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return f.open(func(s *archiveSession) error {
		files, err := loadManifestStrict(s.ctx, s.store)
		if err != nil {
			return err
		}
		files = filesFrom(files, *from)
		if f.json {
			return printLsJSON(files)
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(w, "FIRST\tEND\tROWS\tHOLES\tBYTES\t OBJECT\n")
		for _, file := range files {
			e := file.entry
			fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%d\t %s\n", e.First, e.End, e.Rows, holeOffsets(e), e.Bytes, e.Object)
		}
		return w.Flush()
	})
}

// filesFrom drops the files that end at or below from.
func filesFrom(files []archivedFile, from uint64) []archivedFile {
	i := sort.Search(len(files), func(i int) bool { return files[i].entry.End > from })
	return files[i:]
}

func printLsJSON(files []archivedFile) error {
	out := json.NewEncoder(os.Stdout)
	for _, file := range files {
		e := file.entry
		holes := make([][2]uint64, len(e.Holes))
		for i, h := range e.Holes {
			holes[i] = [2]uint64{h.First, h.End}
		}
		line := lsEntry{First: e.First, End: e.End, Rows: e.Rows, HoleOffsets: holeOffsets(e), Holes: holes, Bytes: e.Bytes,
			Object: e.Object, Segment: file.segment, Digest: e.Digest}
		if err := out.Encode(line); err != nil {
			return err
		}
	}
	return nil
}
