package deploy

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"orderlog/client"
	"orderlog/ingest"
	"orderlog/internal/node"
	"orderlog/proto/orderlogpb"
	"orderlog/sequencer"
)

// notExportedYet are the metric names the rules may use before orderlog
// exports them, each with the work it waits for. Empty: the one it held,
// orderlog_auth_failures_total, came with authentication.
var notExportedYet = map[string]string{}

// exportedMetrics is what orderlog exports: the series a running node
// serves on /metrics, and the names the code registers that only some
// states produce (a vector without samples yet, a disk that is full).
type exportedMetrics struct {
	scraped    map[string]bool // sample names, with _bucket/_sum/_count
	histograms map[string]bool // base names of histograms
	inCode     map[string]bool // names registered in the code
}

// has says whether a series name (as an expression names it) is exported.
func (e exportedMetrics) has(name string) bool {
	if e.scraped[name] || e.inCode[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && e.histograms[base] {
			return true
		}
	}
	return false
}

var exported struct {
	once    sync.Once
	metrics exportedMetrics
	err     error
}

// exportedNames starts a node in process (with an archive, a consumer
// group, rolls, a checkpoint and a refused frame, so that the conditional
// series appear), scrapes it, and adds the names in the code.
func exportedNames(t *testing.T) exportedMetrics {
	t.Helper()
	exported.once.Do(func() {
		exported.metrics, exported.err = scrapeNode()
		if exported.err != nil {
			return
		}
		exported.metrics.inCode, exported.err = namesInCode(exported.metrics.histograms)
	})
	if exported.err != nil {
		t.Fatal(exported.err)
	}
	return exported.metrics
}

func scrapeNode() (exportedMetrics, error) {
	dir, err := os.MkdirTemp(binDir, "node-")
	if err != nil {
		return exportedMetrics{}, err
	}
	s, err := node.Start(node.Config{DataDir: dir, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Logger:     slog.New(slog.DiscardHandler),
		Ingest:     ingest.Config{MaxMessageBytes: 1024, RollBytes: 4 << 10},
		Checkpoint: sequencer.CheckpointConfig{Records: 1, Interval: 50 * time.Millisecond},
		Archive: node.ArchiveConfig{URL: "file://" + filepath.Join(dir, "archive"),
			FileAge: 100 * time.Millisecond, Interval: 50 * time.Millisecond}})
	if err != nil {
		return exportedMetrics{}, fmt.Errorf("start a node: %w", err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		return exportedMetrics{}, err
	}
	if err := exercise(ctx, s.GRPCAddr()); err != nil {
		return exportedMetrics{}, err
	}
	// The archive, the checkpoint and the consumer group's figures follow
	// within a few of their 50 ms intervals.
	want := []string{"orderlog_tiering_files_total", "orderlog_sequencer_checkpoint_age_seconds",
		"orderlog_consumer_group_lag_offsets", "orderlog_ingest_ledger_rolls_total", "orderlog_ingest_refused_frames_total"}
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		m, err := scrape("http://" + s.HTTPAddr() + "/metrics")
		if err != nil {
			return exportedMetrics{}, err
		}
		if !slices.ContainsFunc(want, func(name string) bool { return !m.scraped[name] }) {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return m, nil // the code's names cover the rest
		case <-poll.C:
		}
	}
}

// exercise produces past a ledger roll, has one frame refused, and
// commits a consumer group's offset.
func exercise(ctx context.Context, addr string) error {
	c, err := client.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	p, err := c.NewProducer(ctx, "deploy-test", client.ProducerOptions{})
	if err != nil {
		return err
	}
	defer p.Close()
	for i := range 20 {
		if _, err := p.Produce(ctx, &orderlogpb.Message{Topic: "t", Key: []byte("k"), Value: fmt.Appendf(nil, "%0512d", i)}); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	tooLarge, err := c.NewProducer(ctx, "deploy-test-too-large", client.ProducerOptions{})
	if err != nil {
		return err
	}
	defer tooLarge.Close()
	if _, err := tooLarge.Produce(ctx, &orderlogpb.Message{Topic: "t", Value: make([]byte, 4096)}); err == nil {
		return fmt.Errorf("a 4 KiB message was logged over MaxMessageBytes 1 KiB")
	}
	member, err := c.JoinGroup(ctx, client.GroupOptions{Group: "g", Topics: []string{"t"}, AutoCommit: -1})
	if err != nil {
		return err
	}
	defer member.Close(ctx)
	batch, err := member.Poll(ctx)
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	member.MarkProcessed(batch.Messages[:1]...)
	return member.Commit(ctx)
}

// scrape reads a Prometheus text exposition: the sample names, and the
// histograms its TYPE lines declare.
func scrape(url string) (exportedMetrics, error) {
	resp, err := http.Get(url)
	if err != nil {
		return exportedMetrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return exportedMetrics{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	m := exportedMetrics{scraped: map[string]bool{}, histograms: map[string]bool{}}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		line := lines.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" && f[3] == "histogram" {
			m.histograms[f[2]] = true
		}
		if line == "" || line[0] == '#' {
			continue
		}
		if end := strings.IndexAny(line, "{ "); end > 0 {
			m.scraped[line[:end]] = true
		}
	}
	return m, lines.Err()
}

var (
	metricLiteral  = regexp.MustCompile(`"(orderlog_[a-z0-9_]+)"`)
	histogramOpts  = regexp.MustCompile(`HistogramOpts\{\s*Name:\s*"(orderlog_[a-z0-9_]+)"`)
	constHistogram = regexp.MustCompile(`(?s)NewDesc\("(orderlog_[a-z0-9_]+)".*MustNewConstHistogram`)
)

// namesInCode returns the orderlog_ names the repository's non-test Go
// files that use Prometheus register (bench/ only reads them), and adds
// the histograms among them to histograms.
func namesInCode(histograms map[string]bool) (map[string]bool, error) {
	names := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "bench", "deploy":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(src), "github.com/prometheus/client_golang") {
			return err
		}
		for _, m := range metricLiteral.FindAllStringSubmatch(string(src), -1) {
			names[m[1]] = true
		}
		for _, re := range []*regexp.Regexp{histogramOpts, constHistogram} {
			for _, m := range re.FindAllStringSubmatch(string(src), -1) {
				histograms[m[1]] = true
			}
		}
		return nil
	})
	if len(names) == 0 && err == nil {
		err = fmt.Errorf("no metric names found in the code")
	}
	return names, err
}

// promqlKeywords are the words of PromQL that are not metrics.
var promqlKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"inf": true, "nan": true,
	// aggregations, which may take a grouping before their parenthesis
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
}

// groupings are the keywords a list of label names follows.
var groupings = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// metricNames returns the metric names a PromQL expression selects: the
// identifiers that are not functions, keywords, label names in a matcher
// or a grouping, strings, durations or Grafana variables ($name, ${name}).
func metricNames(expr string) ([]string, error) {
	var names []string
	for i := 0; i < len(expr); {
		r := rune(expr[i])
		switch {
		case r == '"' || r == '\'' || r == '`':
			end := closing(expr, i)
			if end < 0 {
				return nil, fmt.Errorf("unterminated string at %d in %q", i, expr)
			}
			i = end + 1
		case r == '{' || r == '[':
			end := closingBracket(expr, i)
			if end < 0 {
				return nil, fmt.Errorf("unbalanced %c at %d in %q", r, i, expr)
			}
			i = end + 1
		case r == '$':
			i++
			if i < len(expr) && expr[i] == '{' {
				i += strings.IndexByte(expr[i:], '}') + 1
				continue
			}
			for i < len(expr) && isIdent(rune(expr[i])) {
				i++
			}
		case unicode.IsDigit(r) || r == '.':
			for i < len(expr) && (isIdent(rune(expr[i])) || unicode.IsDigit(rune(expr[i])) || expr[i] == '.') {
				i++ // numbers, durations (5m, 1h30m), 1e-3
			}
		case isIdent(r):
			start := i
			for i < len(expr) && (isIdent(rune(expr[i])) || unicode.IsDigit(rune(expr[i]))) {
				i++
			}
			word := expr[start:i]
			next := strings.TrimLeft(expr[i:], " \t\n")
			switch {
			case groupings[word] && strings.HasPrefix(next, "("):
				i = len(expr) - len(next) + strings.IndexByte(next, ')') + 1 // a list of label names
			case promqlKeywords[word]:
			case strings.HasPrefix(next, "("):
				// a function or an aggregation
			default:
				names = append(names, word)
			}
		default:
			i++
		}
	}
	return names, nil
}

func isIdent(r rune) bool { return r == '_' || r == ':' || unicode.IsLetter(r) }

// closingBracket returns the index of the } or ] closing the one at i,
// skipping strings (a label value may hold either).
func closingBracket(s string, i int) int {
	want := map[byte]byte{'{': '}', '[': ']'}[s[i]]
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '"', '\'', '`':
			if j = closing(s, j); j < 0 {
				return -1
			}
		case want:
			return j
		}
	}
	return -1
}

// closing returns the index of the quote closing the string at i.
func closing(s string, i int) int {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case s[i]:
			return j
		}
	}
	return -1
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (instance, le) (rate(orderlog_a_bucket{instance=~"$instance", le!="+Inf"}[$__rate_interval])) > 0.05`: {"orderlog_a_bucket"},
		`max(orderlog_c) - max(orderlog_t) > 0 and on() max(changes(orderlog_t[30m])) == 0`:                           {"orderlog_c", "orderlog_t", "orderlog_t"},
		`min by (group) (orderlog_lag offset 10m) and on(group) orderlog_members > 1e3`:                               {"orderlog_lag", "orderlog_members"},
		`count(x) or vector(0) unless absent(y{role="sequencer"}) * on(a) group_left(b) z`:                            {"x", "y", "z"},
		`label_replace(up, "dst", "$1", "src", "(.*)") / ignoring (le) ${datasource_var} + 2^30`:                      {"up"},
		`histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m:1m])))`:                                               {"h_bucket"},
	} {
		got, err := metricNames(expr)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %v, %v; want %v", expr, got, err, want)
		}
	}
}

// checkExported reports every metric an expression names that orderlog
// does not export, except the ones in notExportedYet; where says where the
// expression is.
func checkExported(t *testing.T, e exportedMetrics, where, expr string) []string {
	t.Helper()
	names, err := metricNames(expr)
	if err != nil {
		t.Errorf("%s: %v", where, err)
	}
	if len(names) == 0 {
		t.Errorf("%s: %q names no metric", where, expr)
	}
	for _, name := range names {
		if e.has(name) {
			continue
		}
		if waits, ok := notExportedYet[name]; ok {
			t.Logf("%s: %s is not exported yet (waits for %s)", where, name, waits)
			continue
		}
		t.Errorf("%s: orderlog exports no metric %s (in %q)", where, name, expr)
	}
	return names
}

func TestScrapedNamesAreInTheCode(t *testing.T) {
	e := exportedNames(t)
	for name := range e.scraped {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && e.histograms[b] {
				base = b
			}
		}
		if strings.HasPrefix(base, "orderlog_") && !e.inCode[base] {
			t.Errorf("the node exports %s, which the search of the code did not find: fix namesInCode", base)
		}
	}
	var onlyInCode []string
	for name := range e.inCode {
		if !e.has(name) || (!e.scraped[name] && !e.scraped[name+"_count"]) {
			onlyInCode = append(onlyInCode, name)
		}
	}
	slices.Sort(onlyInCode)
	t.Logf("registered in the code, not scraped from the test's node: %v", onlyInCode)
}
