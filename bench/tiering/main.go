// Command tiering benchmarks the archive (`make bench-tiering`;
// docs/design.md §8, package tiering, file format tiering/parquetfile),
// each figure against a reference measured in the same run:
//
//  1. It starts `orderlog dev --archive none` (the binary, as bench/e2e
//     does) and produces -rows rows of 1 KiB (8 topics, keys, message
//     ids, a header; JSON-like payloads) with pipelined producers.
//  2. Hot read: a full range read of them through the client
//     (client.Read), -rounds times.
//  3. The writers' reference: it reads the same rows back through the
//     client (not timed) and encodes them, chunk by chunk, with a plain
//     arrow-go pqarrow writer with the archive's settings (reference.go)
//     and with tiering/parquetfile's Writer, into files cut as the worker
//     cuts them (512 MiB), -rounds times.
//  4. Tiering: it restarts the dev on the same data with `--archive
//     file://DIR/archive --archive-file-bytes 512MiB --archive-file-age 1s
//     --archive-hot-window 1h`; the new archive starts at the log start
//     (0), so the elected worker catches up on every row while nothing else
//     runs. It samples orderlog_tiering_archived_watermark on /metrics
//     until T reaches C: the worker's rows/s, from /readyz to T = C.
//     With -tiering-rounds N it does so N times, each from an empty
//     archive (rounds.go), and reports the median; -cpuprofile saves the
//     dev's CPU profile during the first.
//  5. Archive read: it restarts the dev with a 1 s hot window and
//     --retention-bytes 1MiB, waits until the log start reached T and
//     retention deleted the ledgers, and reads the range again through
//     the client, now from the archive (the first round with the node's
//     block cache cold).
//  6. Queries: it opens the archive in-process (tiering.NewArchiveReader
//     over objstore.Open wrapped in a counting store, the head from the
//     dev's etcd) and queries a key the rows do not hold and one they do,
//     classifying every byte read by the files' Parquet metadata (data
//     pages, dictionary pages, the rest: footer, page indexes, bloom
//     filters); and the same through the dev (client.Query).
//  7. Produce latency: bench/e2e's measurement (client.RunLoad at half
//     the peak rate) against two fresh devs side by side, one tiering and
//     one with --archive none, rounds alternating between them.
//
// -only tiering runs steps 1, 3 and 4 alone (the writers and tiering).
//
// It ends with a table, tier_vs_parquet_ratio= (goal ≥ 0.8),
// parquetfile_vs_plain_ratio=, archive_read_vs_hot_ratio= (goal ≥ 0.5),
// absent_key_query_data_bytes= (goal 0), produce_p99_tiering_vs_plain_ratio=
// and tiering_result=PASS|FAIL; a missed goal is a finding, and it exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"orderlog/bench/internal/benchutil"
	"orderlog/client"
	"orderlog/internal/proccpu"
	"orderlog/proto/orderlogpb"
)

// Goals.
const (
	goalTierVsParquet = 0.8
	goalArchiveVsHot  = 0.5
)

// archiveFileBytes is the worker's --archive-file-bytes, and the
// reference writers' cut.
const archiveFileBytes = 512 << 20

type config struct {
	binary                    string
	rows                      int64
	refRows                   int64
	rounds, queryRounds       int
	producers, inFlight       int
	latencyDuration           time.Duration
	latencyRounds             int
	work, data, logs, archive string
	// only "tiering": steps 1, 3 and 4 (produce, the writers, tiering).
	only           string
	tieringRounds  int
	cpuProfile     string // the tiering dev's CPU profile, first round
	profileSeconds int
}

var running []*dev // stopped when check fails

func main() {
	var cfg config
	rows := flag.String("rows", "10M", "rows of 1 KiB to produce and archive (k = 1e3, M = 1e6); quick: 200k")
	refRows := flag.String("ref-rows", "0", "rows the reference writers encode per round (0: all of -rows)")
	flag.StringVar(&cfg.binary, "orderlog", "bin/orderlog", "the orderlog binary to start as `orderlog dev`")
	flag.IntVar(&cfg.rounds, "rounds", 3, "rounds of the hot read, the reference writers and the archive read; medians are reported")
	flag.IntVar(&cfg.queryRounds, "query-rounds", 3, "rounds of each query; medians are reported")
	flag.IntVar(&cfg.producers, "producers", 8, "producers writing the rows at once")
	flag.IntVar(&cfg.inFlight, "inflight", 8, "unacknowledged frames of 64 rows per producer")
	flag.DurationVar(&cfg.latencyDuration, "latency-duration", 8*time.Second, "length of each half-rate latency round")
	flag.IntVar(&cfg.latencyRounds, "latency-rounds", 5, "half-rate latency rounds per dev (alternating)")
	flag.StringVar(&cfg.only, "only", "", "\"tiering\": only produce, the reference writers and tiering (no reads, queries or latency)")
	flag.IntVar(&cfg.tieringRounds, "tiering-rounds", 1, "rounds of the tiering catch-up, each from an empty archive; the median is reported")
	flag.StringVar(&cfg.cpuProfile, "cpuprofile", "", "save the tiering dev's CPU profile during the first tiering round to `file`")
	flag.IntVar(&cfg.profileSeconds, "cpuprofile-seconds", 20, "length of the -cpuprofile profile")
	dir := flag.String("dir", "", "work directory (default: a new one in $TMPDIR, removed at the end)")
	keep := flag.Bool("keep", false, "keep the work directory (data, archive and logs)")
	flag.Parse()
	if cfg.only != "" && cfg.only != "tiering" {
		check(fmt.Errorf("-only %q: want \"tiering\" or nothing", cfg.only))
	}
	debug.SetGCPercent(400) // as the orderlog binary does
	var err error
	cfg.rows, err = parseCount(*rows)
	check(err)
	cfg.refRows, err = parseCount(*refRows)
	check(err)
	cfg.work = *dir
	if cfg.work == "" {
		cfg.work, err = os.MkdirTemp("", "orderlog-tiering-bench-")
		check(err)
	}
	if !*keep {
		defer os.RemoveAll(cfg.work)
	}
	cfg.data, cfg.logs, cfg.archive = filepath.Join(cfg.work, "data"), filepath.Join(cfg.work, "logs"), filepath.Join(cfg.work, "archive")
	check(os.MkdirAll(cfg.logs, 0o755))
	fmt.Printf("tiering: %d rows of 1 KiB, %d rounds; work directory %s\n", cfg.rows, cfg.rounds, cfg.work)
	r := run(context.Background(), cfg)
	r.summarize(cfg.only == "")
}

// results are the run's figures.
type results struct {
	rows, committed             uint64
	produceRate                 float64
	hotMBps, hotMsgs            float64
	plainRate, archiveRate      float64 // rows/s, medians of rounds
	writerRatio                 float64 // parquetfile over plain, median of rounds' ratios
	refRows                     int64
	plainBytes, parquetBytes    int64
	tieringRate, tieringSteady  float64 // rows/s
	tieringSeconds              float64
	files                       float64
	archiveBytes                float64
	logStart                    uint64
	archiveMBps, archiveColdMB  float64
	archiveMsgs                 float64
	absent, present             queryResult
	absentServerMs, presentSrv  float64
	latency                     latencyResult
	deletedLedgers, deletedByte float64
	presentScanEnd              uint64 // the present key's Scan and client.Query cover [0, presentScanEnd)

	// CPU µs per row: the plain writer's thread (median of rounds), the
	// tiering dev's process from /readyz to T = C (0: unknown).
	plainCPUPerRow, tieringCPUPerRow float64
}

func run(ctx context.Context, cfg config) *results {
	r := &results{}
	frames := rowFrames(1024)

	// 1-3: produce, read hot, encode with the reference writers.
	d, err := startDev(cfg.binary, cfg.data, cfg.logs, "1-produce", "--archive", "none")
	check(err)
	stopLater(d)
	r.produceRate, err = produceRows(ctx, d.client, frames, cfg.rows, cfg.producers, cfg.inFlight)
	check(err)
	r.rows = uint64((cfg.rows + frameRows - 1) / frameRows * frameRows)
	r.committed = waitCommitted(ctx, d, r.rows)
	fmt.Printf("produced %d rows at %.0f rows/s; C=%d\n", r.rows, r.produceRate, r.committed)
	if cfg.only == "" {
		r.hotMBps, r.hotMsgs = readRounds(ctx, d, "hot read", r.committed, cfg.rounds, nil)
	}
	refEnd := r.committed
	if cfg.refRows > 0 {
		refEnd = min(refEnd, uint64(cfg.refRows))
	}
	r.encodeRounds(ctx, d, refEnd, cfg)
	stop(d)

	// 4: tiering catches up on the rows.
	archiveURL := "file://" + cfg.archive
	r.tieringRounds(ctx, cfg, archiveURL)
	if cfg.only == "tiering" {
		return r
	}

	// 5: the ledgers deleted, the range read from the archive.
	d, err = startDev(cfg.binary, cfg.data, cfg.logs, "3-archive-read", "--archive", archiveURL, "--archive-file-bytes", "512MiB",
		"--archive-file-age", "1s", "--archive-hot-window", "1s", "--retention-bytes", "1MiB")
	check(err)
	stopLater(d)
	r.waitDeleted(d)
	r.archiveMBps, r.archiveMsgs = readRounds(ctx, d, "archive read", r.logStart, cfg.rounds, &r.archiveColdMB)

	// 6: queries, in-process and through the dev.
	q, closeQuery, err := openArchiveQuery(ctx, cfg.archive, d.etcdAddr, filepath.Join(cfg.work, "query-cache"))
	check(err)
	// A present key's Scan reads every row of a file that may hold it:
	// it is timed over the first file only, so that it costs the same at
	// any -rows.
	r.absent, err = q.query(ctx, absentKey, cfg.queryRounds, q.t)
	check(err)
	r.presentScanEnd = q.entries[0].End
	r.present, err = q.query(ctx, presentKey, cfg.queryRounds, r.presentScanEnd)
	check(err)
	closeQuery()
	r.absentServerMs = serverQuery(ctx, d, absentKey, r.logStart, cfg.queryRounds)
	r.presentSrv = serverQuery(ctx, d, presentKey, min(r.logStart, r.presentScanEnd), cfg.queryRounds)
	stop(d)

	// 7: produce latency with and without tiering.
	plain, err := startDev(cfg.binary, filepath.Join(cfg.work, "latency-plain"), cfg.logs, "4-latency-plain", "--archive", "none")
	check(err)
	stopLater(plain)
	tiered, err := startDev(cfg.binary, filepath.Join(cfg.work, "latency-tiering"), cfg.logs, "4-latency-tiering",
		"--archive", "file://"+filepath.Join(cfg.work, "latency-archive"), "--archive-file-bytes", "512MiB",
		"--archive-file-age", "1s", "--archive-hot-window", "1h")
	check(err)
	stopLater(tiered)
	r.latency, err = measureLatency(ctx, plain, tiered, cfg.latencyDuration, cfg.latencyRounds)
	check(err)
	stop(plain)
	stop(tiered)
	return r
}

// waitCommitted waits until C covers the produced rows.
func waitCommitted(ctx context.Context, d *dev, rows uint64) uint64 {
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := d.committed(ctx)
		check(err)
		if c >= rows {
			return c
		}
		if time.Now().After(deadline) {
			check(fmt.Errorf("C=%d after a minute, %d rows acknowledged", c, rows))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readRounds reads [0, end) through the client rounds times and returns
// the median MB/s (protobuf bytes of the messages) and msg/s; cold, if
// not nil, gets the first round's MB/s.
func readRounds(ctx context.Context, d *dev, label string, end uint64, rounds int, cold *float64) (float64, float64) {
	var mbps, msgs []float64
	for round := range rounds {
		start := time.Now()
		n, bytes, err := readRange(ctx, d.client, end)
		check(err)
		elapsed := time.Since(start).Seconds()
		fmt.Printf("%s round %d: %d messages, %.1f MB in %.2f s: %.1f MB/s, %.0f msg/s\n", label, round, n, float64(bytes)/1e6,
			elapsed, float64(bytes)/1e6/elapsed, float64(n)/elapsed)
		if uint64(n) != end {
			fmt.Printf("%s round %d: read %d messages of [0, %d): holes\n", label, round, n, end)
		}
		mbps = append(mbps, float64(bytes)/1e6/elapsed)
		msgs = append(msgs, float64(n)/elapsed)
		if round == 0 && cold != nil {
			*cold = mbps[0]
		}
	}
	return benchutil.Median(mbps), benchutil.Median(msgs)
}

// readRange reads [0, end) with client.Read and counts messages and
// their protobuf bytes.
func readRange(ctx context.Context, c *client.Client, end uint64) (int, int64, error) {
	n, bytes := 0, int64(0)
	err := c.Read(ctx, 0, 0, func(p *client.Page) error {
		for _, m := range p.Messages {
			if m.Offset >= end {
				return errEnough
			}
			n++
			bytes += int64(proto.Size(m))
		}
		if p.NextOffset >= end {
			return errEnough
		}
		return nil
	})
	if errors.Is(err, errEnough) {
		err = nil
	}
	return n, bytes, err
}

// encodeRounds times both writers on rows [0, end), rounds times.
func (r *results) encodeRounds(ctx context.Context, d *dev, end uint64, cfg config) {
	var plain, archive, ratios, plainCPU []float64
	for round := range cfg.rounds {
		res, err := encodeRound(ctx, d.client, end, archiveFileBytes, cfg.work)
		check(err)
		p, a := float64(res.rows)/res.plain.Seconds(), float64(res.rows)/res.archive.Seconds()
		fmt.Printf("writers round %d: %d rows (%.1f MB of protobuf) in %d files: plain arrow-go %.0f rows/s (%.2f s, %.1f MB), parquetfile.Writer %.0f rows/s (%.2f s, %.1f MB)\n",
			round, res.rows, float64(res.protoBytes)/1e6, res.files, p, res.plain.Seconds(), float64(res.plainFile)/1e6,
			a, res.archive.Seconds(), float64(res.archiveOut)/1e6)
		plain, archive, ratios = append(plain, p), append(archive, a), append(ratios, a/p)
		plainCPU = append(plainCPU, res.plainCPU.Seconds()*1e6/float64(res.rows))
		r.refRows, r.plainBytes, r.parquetBytes = res.rows, res.plainFile, res.archiveOut
	}
	r.plainRate, r.archiveRate, r.writerRatio = benchutil.Median(plain), benchutil.Median(archive), benchutil.Median(ratios)
	r.plainCPUPerRow = benchutil.Median(plainCPU)
}

// watchTiering samples T every 100 ms until it reaches C, from the
// archive's head in the dev's etcd: a small read, where /metrics (28 KB of
// text, ten times a second) took ~3 % of a core from the dev it measured.
// The conflict gauge is read from /metrics every 5 s.
func (r *results) watchTiering(d *dev) {
	start := time.Now()
	cpuStart, cpuErr := proccpu.Process(d.cmd.Process.Pid)
	var lastT float64
	var firstMove, lastMove time.Time
	var firstMoveT float64
	progress := time.Now()
	head := headWatcher(d)
	defer head.close()
	for {
		h := head.read()
		t := float64(h.T)
		if t > lastT {
			if firstMove.IsZero() {
				firstMove, firstMoveT = time.Now(), t
			}
			lastMove, lastT = time.Now(), t
		}
		if uint64(t) >= r.committed {
			r.files, r.archiveBytes = float64(h.Files), float64(h.Bytes)
			r.tieringCPUPerRow = 0
			if cpuEnd, err := proccpu.Process(d.cmd.Process.Pid); err == nil && cpuErr == nil {
				r.tieringCPUPerRow = (cpuEnd - cpuStart).Seconds() * 1e6 / float64(r.committed)
			}
			break
		}
		if time.Since(progress) > 5*time.Second {
			progress = time.Now()
			if m, _ := d.metric("orderlog_tiering_conflict"); m != 0 {
				check(fmt.Errorf("the tiering worker halted (orderlog_tiering_conflict=1); see %s", d.logPath))
			}
			fmt.Printf("  tiering: T=%.0f of C=%d after %.1f s\n", t, r.committed, time.Since(start).Seconds())
		}
		if time.Since(start) > 2*time.Hour {
			check(fmt.Errorf("T=%.0f, not C=%d, after 2 h", t, r.committed))
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.tieringSeconds = lastMove.Sub(start).Seconds()
	r.tieringRate = float64(r.committed) / r.tieringSeconds
	if lastMove.After(firstMove) {
		// T counts offsets: the restart's takeover made the unused
		// reservation above the rows a hole, which the last file holds.
		r.tieringSteady = (min(lastT, float64(r.committed)) - firstMoveT) / lastMove.Sub(firstMove).Seconds()
	}
	fmt.Printf("tiering: T reached C=%d %.2f s after /readyz: %.0f rows/s (%.0f files, %.1f MB); between the first and last file: %.0f rows/s; %.2f CPU µs per row\n",
		r.committed, r.tieringSeconds, r.tieringRate, r.files, r.archiveBytes/1e6, r.tieringSteady, r.tieringCPUPerRow)
}

// waitDeleted waits until the log start reached the archived rows and
// retention deleted the ledgers below it.
func (r *results) waitDeleted(d *dev) {
	deadline := time.Now().Add(3 * time.Minute)
	var m map[string]float64
	stable := 0
	for time.Now().Before(deadline) {
		m = scrapeMetrics(d.http, "orderlog_log_start", "orderlog_retention_deleted_ledgers_total",
			"orderlog_retention_deleted_bytes_total", "orderlog_store_ledgers")
		deleted := m["orderlog_retention_deleted_ledgers_total"]
		if uint64(m["orderlog_log_start"]) >= r.committed && deleted > 0 && deleted == r.deletedLedgers {
			if stable++; stable >= 20 { // 2 s without a deletion
				break
			}
		} else {
			stable = 0
		}
		r.deletedLedgers = deleted
		time.Sleep(100 * time.Millisecond)
	}
	r.logStart, r.deletedByte = uint64(m["orderlog_log_start"]), m["orderlog_retention_deleted_bytes_total"]
	fmt.Printf("archive read: log start %d (C=%d); retention deleted %.0f ledgers, %.1f MB; ledgers left in the store %.0f\n",
		r.logStart, r.committed, r.deletedLedgers, r.deletedByte/1e6, m["orderlog_store_ledgers"])
	if r.logStart == 0 || r.deletedLedgers == 0 {
		check(fmt.Errorf("retention moved the log start to %d and deleted %.0f ledgers: nothing to read from the archive", r.logStart, r.deletedLedgers))
	}
}

// serverQuery times client.Query by key over [0, end) through the dev
// (rounds times) and returns the median in ms.
func serverQuery(ctx context.Context, d *dev, key []byte, end uint64, rounds int) float64 {
	var lat []float64
	for range rounds {
		start := time.Now()
		matches := 0
		err := d.client.Query(ctx, &orderlogpb.QueryRequest{FromOffset: 0, Key: key}, func(p *client.Page) error {
			matches += len(p.Messages)
			if p.NextOffset >= end {
				return errEnough
			}
			return nil
		})
		if !errors.Is(err, errEnough) {
			check(err)
		}
		lat = append(lat, msSince(start))
	}
	return benchutil.Median(lat)
}

func stopLater(d *dev) { running = append(running, d) }

// stop stops d now (and not again when check fails).
func stop(d *dev) {
	d.stop()
	for i, r := range running {
		if r == d {
			running = append(running[:i], running[i+1:]...)
			break
		}
	}
}

// parseCount reads 200k, 2M or a plain count.
func parseCount(s string) (int64, error) {
	scale := 1.0
	text := strings.TrimSpace(s)
	switch {
	case strings.HasSuffix(text, "k"):
		scale, text = 1e3, strings.TrimSuffix(text, "k")
	case strings.HasSuffix(text, "M"):
		scale, text = 1e6, strings.TrimSuffix(text, "M")
	}
	v, err := strconv.ParseFloat(text, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("want a count such as 200k or 10M: %q", s)
	}
	return int64(v * scale), nil
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/tiering:", err)
		for _, d := range running {
			d.stop()
		}
		os.Exit(1)
	}
}
