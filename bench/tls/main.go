// Command tls measures what TLS costs on the write path (`make
// bench-tls`): it starts two `orderlog dev` processes on the same disk,
// one in plaintext and one with --tls, and drives each in turn with the
// `make bench-e2e` load (16 idempotent gRPC streams of 1 KiB messages in
// 64-message frames, 8 frames in flight, fsync before ack; the TLS client
// trusts the dev CA and presents the dev client certificate). Each round
// measures both servers as fast as they go, then both at half the
// plaintext peak for the ack latency; which server goes first alternates
// by round, and medians over the rounds are reported. Each peak run also
// counts the CPU time the server process and the load generator spent
// per message: on a shared machine the rates swing with the neighbours'
// load, the CPU per message much less. It ends with
// tls_cpu_per_msg_ratio=<CPU µs per message, TLS over plaintext>,
// tls_vs_plain_ratio=<peak msg/s, TLS over plaintext> and
// tls_p99_vs_plain_ratio=<half-rate ack p99, TLS over plaintext>.
//
// With -secure (`make bench-secure`) the second server runs with
// everything issue 19 adds on: TLS, authentication (the load's client
// presents a token, and every frame is checked against the ACLs) and WAL
// encryption at rest (--encryption-key-file); the figures are then named
// secure_…, ending with secure_vs_plain_ratio=.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"orderlog/bench/internal/benchutil"
	"orderlog/client"
	"orderlog/internal/proccpu"
	"orderlog/internal/tlsconfig"
)

// server is one `orderlog dev` process and a client of it.
type server struct {
	name string
	cmd  *exec.Cmd
	cl   *client.Client
}

func main() {
	binary := flag.String("orderlog", "bin/orderlog", "the orderlog binary to start as `orderlog dev`")
	duration := flag.Duration("duration", 6*time.Second, "length of each measurement")
	rounds := flag.Int("rounds", 5, "rounds; medians are reported")
	streams := flag.Int("streams", 16, "producer streams")
	size := flag.Int("size", 1024, "message size")
	secureMode := flag.Bool("secure", false, "the second server with TLS, tokens and ACLs, and WAL encryption at rest (bench-secure)")
	flag.Parse()
	second := "tls"
	if *secureMode {
		second = "secure"
	}
	debug.SetGCPercent(400) // as bench/e2e and the orderlog binary do

	dir, err := os.MkdirTemp("", "orderlog-tls-bench")
	check(err)
	defer os.RemoveAll(dir)
	plain := start(*binary, "plaintext", filepath.Join(dir, "plain"), false, false)
	defer plain.stop()
	secure := start(*binary, second, filepath.Join(dir, second), true, *secureMode)
	defer secure.stop()

	ctx := context.Background()
	load := client.LoadConfig{Streams: *streams, Size: *size, Frame: 64, InFlight: 8, Duration: *duration}
	for _, s := range []*server{plain, secure} { // warm-up: ledgers open, reservations made
		warm := load
		warm.Duration = time.Second
		_, err := client.RunLoad(ctx, s.cl, warm)
		check(err)
	}
	peaks := map[string][]float64{}
	p99s := map[string][]float64{}
	cpus := map[string][]float64{}
	var peakRatios, p99Ratios, cpuRatios []float64
	for r := range *rounds {
		order := []*server{plain, secure}
		if r%2 == 1 {
			order = []*server{secure, plain}
		}
		peak := map[string]client.LoadResult{}
		cpu := map[string]float64{}
		for _, s := range order {
			before := s.cpu()
			peak[s.name] = run(ctx, s, load, fmt.Sprintf("round %d %s peak", r, s.name))
			used := s.cpu().minus(before)
			cpu[s.name] = used.total() / float64(peak[s.name].Messages)
			fmt.Printf("round %d %s peak CPU: server %.2f µs/msg, load generator %.2f µs/msg\n", r, s.name,
				used.server/float64(peak[s.name].Messages), used.client/float64(peak[s.name].Messages))
			peaks[s.name] = append(peaks[s.name], peak[s.name].MessagesPerSecond())
			cpus[s.name] = append(cpus[s.name], cpu[s.name])
		}
		cpuRatios = append(cpuRatios, cpu[second]/cpu["plaintext"])
		half := load
		half.Rate = peak["plaintext"].MessagesPerSecond() / 2
		p99 := map[string]float64{}
		for _, s := range order {
			res := run(ctx, s, half, fmt.Sprintf("round %d %s at %.0f msg/s", r, s.name, half.Rate))
			p99[s.name] = ms(res.Percentile(0.99))
			p99s[s.name] = append(p99s[s.name], p99[s.name])
		}
		peakRatios = append(peakRatios, peak[second].MessagesPerSecond()/peak["plaintext"].MessagesPerSecond())
		p99Ratios = append(p99Ratios, p99[second]/p99["plaintext"])
	}
	for _, name := range []string{"plaintext", second} {
		fmt.Printf("%s_msgs_per_s=%.0f (median of %d rounds)\n", name, benchutil.Median(peaks[name]), *rounds)
		fmt.Printf("%s_p99_ack_ms_at_half_rate=%.3f (median of %d rounds)\n", name, benchutil.Median(p99s[name]), *rounds)
		fmt.Printf("%s_cpu_us_per_msg=%.2f (server and load generator at the peak, median of %d rounds)\n", name, benchutil.Median(cpus[name]), *rounds)
	}
	fmt.Printf("%s_cpu_per_msg_ratio=%.3f (median of the rounds' ratios)\n", second, benchutil.Median(cpuRatios))
	fmt.Printf("%s_vs_plain_ratio=%.3f (median of the rounds' peak ratios)\n", second, benchutil.Median(peakRatios))
	fmt.Printf("%s_p99_vs_plain_ratio=%.3f (median of the rounds' half-rate p99 ratios)\n", second, benchutil.Median(p99Ratios))
}

// start starts `orderlog dev` on free ports with its data in dir and
// connects to it once it is ready.
func start(binary, name, dir string, tls, secure bool) *server {
	args := []string{"dev", "--data", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--etcd-addr", "127.0.0.1:0", "--archive", "none"}
	if tls {
		args = append(args, "--tls")
	}
	if secure {
		check(os.MkdirAll(dir, 0o700))
		keyFile := filepath.Join(dir, "..", name+".keys")
		check(os.WriteFile(keyFile, []byte("1 "+strings.Repeat("5a", 32)+"\n"), 0o600))
		args = append(args, "--encryption-key-file", keyFile)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	check(err)
	check(cmd.Start())
	s := &server{name: name, cmd: cmd}
	addr, err := benchutil.ReadGRPCAddr(stdout)
	check(err)
	var opts []client.Option
	if tls {
		source, err := tlsconfig.Load(tlsconfig.DevFiles(filepath.Join(dir, "tls")).Client())
		check(err)
		opts = append(opts, client.WithTLS(source.ClientConfig()))
	}
	s.cl, err = client.Dial(addr, opts...)
	check(err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	check(s.cl.WaitReady(ctx))
	if secure { // authentication on: the load presents a token; frames are checked against ACLs
		// the first token turns authentication on; it is an administrator
		// (an ACL entry on "*"), whose every frame the ACLs are asked about
		resp, err := s.cl.Auth().CreateToken(ctx, "bench", "bench-secure", true)
		check(err)
		s.cl.Close()
		s.cl, err = client.Dial(addr, append(opts, client.WithToken(resp.Secret))...)
		check(err)
		check(s.cl.WaitReady(ctx))
	}
	return s
}

// cpuTime is CPU time in µs: the server process's and this process's
// (the load generator; its clients run one at a time).
type cpuTime struct{ server, client float64 }

func (c cpuTime) minus(o cpuTime) cpuTime { return cpuTime{c.server - o.server, c.client - o.client} }
func (c cpuTime) total() float64          { return c.server + c.client }

// cpu reads the server's user and system time from /proc (clock ticks of
// 10 ms) and this process's from getrusage.
func (s *server) cpu() cpuTime {
	server, err := proccpu.Process(s.cmd.Process.Pid)
	check(err)
	return cpuTime{server: float64(server.Microseconds()), client: float64(proccpu.Self().Microseconds())}
}

func (s *server) stop() {
	s.cl.Close()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}

func run(ctx context.Context, s *server, load client.LoadConfig, label string) client.LoadResult {
	res, err := client.RunLoad(ctx, s.cl, load)
	check(err)
	fmt.Printf("%s: %.0f msg/s, %.1f MB/s, ack p50 %.2f ms, p99 %.2f ms\n", label,
		res.MessagesPerSecond(), res.MBPerSecond(), ms(res.Percentile(0.5)), ms(res.Percentile(0.99)))
	return res
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/tls:", err)
		os.Exit(1)
	}
}
