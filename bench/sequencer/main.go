// Command sequencer benchmarks the sequencer's Grant stream on loopback:
// grants per second over one and over 8 gRPC streams, each grant reported
// Written so the commit log (on a real WAL store, fsync per group) and C
// advance, against a bare gRPC echo stream exchanging frames of the same
// sizes, measured in the same run. It prints grants_vs_echo_ratio.
//
// Usage: go run ./bench/sequencer [-duration 3s] [-batch 64] [-window 512]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"orderlog/bench/internal/benchutil"
	"orderlog/ingest/ledger"
	"orderlog/ingest/wal"
	"orderlog/internal/etcdserver"
	"orderlog/internal/keys"
	pb "orderlog/proto/sequencerpb"
	"orderlog/sequencer"
)

var (
	duration = flag.Duration("duration", time.Second, "measurement time per round")
	rounds   = flag.Int("rounds", 5, "alternating sequencer/echo rounds per case; the median pair ratio is reported")
	batch    = flag.Int("batch", 64, "grant requests per frame")
	window   = flag.Int("window", 512, "grant requests in flight per stream")
	cpuProf  = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memProf  = flag.String("memprofile", "", "write an allocation profile at the end of the run to this file")
	cases    = flag.String("streams", "1,8", "comma-separated stream counts to measure; the ratio printed last is the lowest")
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	// As the orderlog binary runs the sequencer (and both sides of the
	// comparison alike): its GC setting, not the library default.
	debug.SetGCPercent(400)
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		check(err)
		check(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	dir, err := os.MkdirTemp("", "bench-sequencer-")
	check(err)
	defer os.RemoveAll(dir)

	etcd, err := etcdserver.Start(etcdserver.Config{Dir: dir + "/etcd"})
	check(err)
	defer etcd.Close()
	cli, err := etcd.NewClient()
	check(err)
	defer cli.Close()

	store, err := wal.Open(wal.Config{Dir: dir + "/wal"})
	check(err)
	defer store.Close()
	storeLis, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	storeSrv := wal.Serve(storeLis, store)
	defer storeSrv.Stop()
	member := ledger.Member{StoreID: store.StoreID(), Incarnation: store.Incarnation(), Address: storeLis.Addr().String()}
	dialer := ledger.NewGRPCDialer()
	defer dialer.Close()

	seqLis, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	node, err := sequencer.NewNode(sequencer.Config{
		// A long session TTL: this measures grants, not failover, and a
		// loaded machine must not lose the leader mid-run.
		Address: seqLis.Addr().String(), Etcd: cli, SessionTTL: 10,
		Ledgers: &sequencer.LedgerClient{Etcd: cli, Stores: dialer, Writer: "sequencer",
			Replication: sequencer.CommitReplication{Ensemble: []ledger.Member{member}, AckQuorum: 1}},
	})
	check(err)
	seqSrv := grpc.NewServer()
	sequencer.Register(seqSrv, node)
	go seqSrv.Serve(seqLis)
	defer seqSrv.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go node.Run(ctx)
	for !node.Status().Serving {
		time.Sleep(5 * time.Millisecond)
	}

	echoLis, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	echoSrv := grpc.NewServer()
	pb.RegisterSequencerServer(echoSrv, &echo{})
	go echoSrv.Serve(echoLis)
	defer echoSrv.Stop()

	fmt.Printf("frames of %d grant requests (+ Written reports), %d requests in flight per stream, %d alternating rounds of %v\n",
		*batch, *window, *rounds, *duration)
	var ratios []float64
	for _, field := range strings.Split(*cases, ",") {
		streams, err := strconv.Atoi(strings.TrimSpace(field))
		check(err)
		// Alternate the two so that load from elsewhere on the machine hits
		// both alike; report medians.
		var gs, es, rs []float64
		for r := 0; r < *rounds; r++ {
			g := run(ctx, cli, member, dialer, seqLis.Addr().String(), streams, true)
			e := run(ctx, cli, member, dialer, echoLis.Addr().String(), streams, false)
			gs, es, rs = append(gs, g), append(es, e), append(rs, g/e)
		}
		fmt.Printf("streams=%d grants_per_sec=%.0f echo_per_sec=%.0f ratio=%.2f (medians of %d rounds)\n",
			streams, benchutil.Median(gs), benchutil.Median(es), benchutil.Median(rs), *rounds)
		ratios = append(ratios, benchutil.Median(rs))
	}
	st := node.Status()
	fmt.Printf("sequencer epoch=%d published_C=%d\n", st.Epoch, st.Published)
	fmt.Printf("grants_vs_echo_ratio=%.2f\n", slices.Min(ratios))
	if *memProf != "" {
		f, err := os.Create(*memProf)
		check(err)
		check(pprof.Lookup("allocs").WriteTo(f, 0))
		f.Close()
	}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

var incarnations atomic.Int64

// run drives streams concurrent Grant streams for the measurement time and
// returns grants per second. Against the sequencer, each stream is an ingest
// incarnation with a real open ledger whose grants it reports Written.
func run(ctx context.Context, cli *clientv3.Client, member ledger.Member, dialer ledger.Dialer, addr string, streams int, real bool) float64 {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	check(err)
	defer conn.Close()
	var total atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < streams; i++ {
		inc := fmt.Sprintf("bench-%d", incarnations.Add(1))
		var ledgerID uint64 = 1
		if real {
			ledgerID = openLedger(ctx, cli, member, dialer, inc)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			total.Add(stream(ctx, pb.NewSequencerClient(conn), inc, ledgerID, start))
		}()
	}
	time.Sleep(100 * time.Millisecond)
	t0 := time.Now()
	close(start)
	wg.Wait()
	return float64(total.Load()) / time.Since(t0).Seconds()
}

func openLedger(ctx context.Context, cli *clientv3.Client, member ledger.Member, dialer ledger.Dialer, inc string) uint64 {
	lease, err := cli.Grant(ctx, 30)
	check(err)
	_, err = cli.Put(ctx, keys.Ingest(inc), "alive", clientv3.WithLease(lease.ID))
	check(err)
	for {
		resp, err := cli.Get(ctx, keys.SeqEpoch)
		check(err)
		var epoch int64
		fmt.Sscan(string(resp.Kvs[0].Value), &epoch)
		w, err := ledger.Create(ctx, cli, ledger.CreateOptions{Epoch: epoch, WriterIncarnation: inc,
			Ensemble: []ledger.Member{member}, AckQuorum: 1, Stores: dialer})
		if errors.Is(err, ledger.ErrStaleEpoch) {
			continue // a new leader took over meanwhile
		}
		check(err)
		return w.ID()
	}
}

// stream runs one Grant stream: frames of *batch requests, at most *window
// requests in flight; every granted range is reported Written in the next
// frame (entry ids counting up). It returns the grants received.
func stream(ctx context.Context, client pb.SequencerClient, inc string, ledgerID uint64, start <-chan struct{}) int64 {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := client.Grant(sctx)
	check(err)
	check(s.Send(&pb.IngestFrame{Hello: &pb.Hello{Incarnation: inc, LeaseId: 1}}))
	<-start
	deadline := time.Now().Add(*duration)

	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	var inFlight int
	var toReport []*pb.Range
	var granted int64
	var ended bool
	var sendMu sync.Mutex // Send is not safe for concurrent use
	send := func(f *pb.IngestFrame) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return s.Send(f)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			f, err := s.Recv()
			mu.Lock()
			if err != nil {
				ended = true
				cond.Broadcast()
				mu.Unlock()
				return
			}
			for _, g := range f.Grants {
				if g.Status == pb.GrantStatus_GRANTED {
					granted++
					toReport = append(toReport, g.Range)
				}
			}
			inFlight -= len(f.Grants)
			cond.Signal()
			mu.Unlock()
		}
	}()
	// Like an ingest node, keep the session alive while waiting for replies.
	stopHeartbeat := make(chan struct{})
	go func() {
		t := time.NewTicker(sequencer.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-stopHeartbeat:
				return
			case <-t.C:
				if send(&pb.IngestFrame{Heartbeat: true}) != nil {
					return
				}
			}
		}
	}()
	defer close(stopHeartbeat)
	var req uint64
	var entry int64
	for time.Now().Before(deadline) {
		mu.Lock()
		for inFlight+*batch > *window && !ended {
			cond.Wait()
		}
		if ended {
			mu.Unlock()
			break
		}
		inFlight += *batch
		reports := toReport
		toReport = nil
		mu.Unlock()
		f := &pb.IngestFrame{Grants: make([]*pb.GrantRequest, *batch), Written: make([]*pb.Written, len(reports))}
		for i := range f.Grants {
			req++
			f.Grants[i] = &pb.GrantRequest{RequestId: req, LedgerId: ledgerID, Count: 1 + req%8}
		}
		for i, r := range reports {
			f.Written[i] = &pb.Written{LedgerId: ledgerID, EntryId: entry, Range: r}
			entry++
		}
		if err := send(f); err != nil {
			break
		}
	}
	mu.Lock()
	n, broke := granted, ended
	mu.Unlock()
	cancel()
	<-done
	if broke {
		log.Printf("a grant stream ended early (counted what it got)")
	}
	return n
}

// echo answers each frame with one reply per request, the same shape and
// sizes as the sequencer's grant replies, and nothing else.
type echo struct {
	pb.UnimplementedSequencerServer
	next atomic.Uint64
}

func (e *echo) Grant(s grpc.BidiStreamingServer[pb.IngestFrame, pb.SequencerFrame]) error {
	for {
		f, err := s.Recv()
		if err != nil {
			return err
		}
		if len(f.Grants) == 0 {
			continue
		}
		out := &pb.SequencerFrame{Epoch: 7, Grants: make([]*pb.GrantReply, len(f.Grants))}
		for i, g := range f.Grants {
			first := e.next.Add(g.Count) - g.Count
			out.Grants[i] = &pb.GrantReply{RequestId: g.RequestId, Status: pb.GrantStatus_GRANTED, LedgerId: g.LedgerId,
				Range: &pb.Range{First: first, End: first + g.Count}, LeaseMs: 3000}
		}
		if err := s.Send(out); err != nil {
			return err
		}
	}
}
