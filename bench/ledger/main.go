// Command ledger benchmarks replicated ledgers against a single store in
// the same run (`make bench-ledger`):
//
//  1. reference: 1 KiB entries through a W=1/A=1 ledger on one WAL store
//     over gRPC on loopback, as fast as the writer's window allows;
//  2. the same through a W=3/A=2 ledger on three WAL stores (all on this
//     machine's one disk, so every byte is written and fsynced three times:
//     ~0.33 is the physical expectation), printed as
//     ledger3_vs_single_ratio (goal >= 0.3);
//  3. confirm latency (Append → LAC covers the entry) of the W=3/A=2 ledger
//     at half its measured throughput, paced, p50 and p99, and of the single
//     store at the same rate as the reference.
//
// Stores are real ingest/wal stores (fsync before ack) in -dir; metadata
// lives in an embedded etcd.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"time"

	"google.golang.org/grpc"

	"orderlog/ingest/ledger"
	"orderlog/ingest/wal"
	"orderlog/internal/etcdserver"
	"orderlog/internal/keys"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func main() {
	dirFlag := flag.String("dir", "", "directory for the data (default: a new temporary directory, removed afterwards)")
	duration := flag.Duration("duration", 5*time.Second, "length of each measurement")
	entrySize := flag.Int("entry", 1024, "entry payload size in bytes")
	inFlight := flag.Int("inflight", 8192, "writer window: entries appended but not yet confirmed")
	frame := flag.Int("frame", 256, "entries per AddEntries frame at most")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		check(err)
		check(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}

	dir := *dirFlag
	if dir == "" {
		var err error
		dir, err = os.MkdirTemp("", "ledgerbench")
		check(err)
		defer os.RemoveAll(dir)
	}
	fmt.Printf("dir=%s duration=%s entry=%dB inflight=%d frame=%d\n", dir, *duration, *entrySize, *inFlight, *frame)

	etcd, err := etcdserver.Start(etcdserver.Config{Dir: filepath.Join(dir, "etcd")})
	check(err)
	defer etcd.Close()
	cli, err := etcd.NewClient()
	check(err)
	defer cli.Close()
	ctx := context.Background()
	_, err = cli.Put(ctx, keys.SeqEpoch, "1")
	check(err)
	_, err = cli.Put(ctx, keys.Ingest("bench"), "alive")
	check(err)

	var members []ledger.Member
	for i := range 3 {
		m, stop := startStore(filepath.Join(dir, fmt.Sprintf("store-%d", i)))
		defer stop()
		members = append(members, m)
	}
	dialer := ledger.NewGRPCDialer()
	defer dialer.Close()
	opts := ledger.WriterOptions{MaxInFlight: *inFlight, MaxFrameEntries: *frame}
	payload := make([]byte, *entrySize)

	single := run(cli, dialer, members[:1], 1, 0, opts, payload, *duration, 0)
	fmt.Printf("single store (W=1 A=1): %.0f entries/s, %.1f MB/s, p50 %s p99 %s (saturated)\n",
		single.perSec, single.perSec*float64(*entrySize)/1e6, single.p50, single.p99)
	three := run(cli, dialer, members, 2, 1, opts, payload, *duration, 0)
	fmt.Printf("ledger W=3 A=2: %.0f entries/s, %.1f MB/s, p50 %s p99 %s (saturated)\n",
		three.perSec, three.perSec*float64(*entrySize)/1e6, three.p50, three.p99)
	fmt.Printf("ledger3_vs_single_ratio=%.2f\n", three.perSec/single.perSec)

	rate := three.perSec / 2
	paced := run(cli, dialer, members, 2, 1, opts, payload, *duration, rate)
	fmt.Printf("ledger W=3 A=2 at %.0f entries/s (half its max): confirm latency p50 %s p99 %s\n", rate, paced.p50, paced.p99)
	pacedSingle := run(cli, dialer, members[:1], 1, 0, opts, payload, *duration, rate)
	fmt.Printf("single store at the same rate: confirm latency p50 %s p99 %s\n", pacedSingle.p50, pacedSingle.p99)
	fmt.Printf("ledger3_p99_confirm_ms=%.2f ledger3_vs_single_p99_latency_ratio=%.2f\n",
		float64(paced.p99)/1e6, float64(paced.p99)/float64(pacedSingle.p99))
}

type result struct {
	perSec   float64
	p50, p99 time.Duration
}

// run appends for d (paced at rate entries/s if rate > 0, else as fast as
// the window allows), waits for the last confirmation and closes.
func run(cli *clientv3.Client, dialer ledger.Dialer, ensemble []ledger.Member, ackQuorum, tolerate int,
	opts ledger.WriterOptions, payload []byte, d time.Duration, rate float64) result {
	// Times are nanoseconds since start in pointer-free slices, so the
	// garbage collector does not scan them.
	const capacity = 1 << 22
	appendedAt := make([]int64, capacity)
	latencies := make([]time.Duration, 0, capacity)
	reported := int64(-1)
	var start time.Time
	opts.OnConfirm = func(lac int64) {
		now := int64(time.Since(start))
		for id := reported + 1; id <= lac; id++ {
			latencies = append(latencies, time.Duration(now-appendedAt[id]))
		}
		reported = lac
	}
	ctx := context.Background()
	w, err := ledger.Create(ctx, cli, ledger.CreateOptions{Epoch: 1, WriterIncarnation: "bench", Ensemble: ensemble,
		AckQuorum: ackQuorum, Tolerate: tolerate, Stores: dialer, Writer: opts})
	check(err)
	start = time.Now()
	last := int64(-1)
	for id := int64(0); id < capacity; id++ {
		intended := time.Now()
		if rate > 0 {
			intended = start.Add(time.Duration(float64(id) / rate * float64(time.Second)))
			if wait := time.Until(intended); wait > 0 {
				time.Sleep(wait)
			}
		}
		if intended.Sub(start) >= d {
			break
		}
		appendedAt[id] = int64(intended.Sub(start))
		span := ledger.Span{First: uint64(id) * 10, End: uint64(id)*10 + 10}
		last, err = w.Append(payload, span)
		check(err)
	}
	check(w.WaitConfirmed(ctx, last))
	elapsed := time.Since(start)
	m, err := w.Close(ctx)
	check(err)
	if m.LastEntry != last {
		check(fmt.Errorf("closed at %d, appended %d", m.LastEntry, last))
	}
	// OnConfirm has run for every entry ≤ last once Close returned.
	slices.Sort(latencies)
	return result{
		perSec: float64(last+1) / elapsed.Seconds(),
		p50:    latencies[len(latencies)/2],
		p99:    latencies[len(latencies)*99/100],
	}
}

// startStore opens a real WAL store and serves it on a loopback port.
func startStore(dir string) (ledger.Member, func()) {
	st, err := wal.Open(wal.Config{Dir: dir})
	check(err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	srv := wal.Serve(lis, st, grpc.MaxRecvMsgSize(16<<20))
	m := ledger.Member{StoreID: st.StoreID(), Incarnation: st.Incarnation(), Address: lis.Addr().String()}
	return m, func() {
		srv.Stop()
		_ = st.Close()
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-ledger:", err)
		os.Exit(1)
	}
}
