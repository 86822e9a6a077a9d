package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// artifactsEnv names the directory the browser test saves its screenshots
// in (one PNG per page it checks, and FAIL-<step>.png of the page a step
// failed on); default a temporary directory that the test removes. `make
// test` sets it to artifacts/console.
const artifactsEnv = "ORDERLOG_CONSOLE_ARTIFACTS"

// TestConsoleBrowser drives the console in headless Chromium against a
// real `orderlog dev`: see a refused frame's error code on the Overview,
// find messages by key and by offset and check how their payloads and
// headers render, follow a tail while messages arrive, watch a consumer
// group's lag change and find the group in the list, see a producer's
// epoch and last seq, see the hole a SIGKILL restart leaves, on the
// Messages page and in the archive's files, and fail on any error in the
// browser's log.
func TestConsoleBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts orderlog dev and Chromium")
	}
	chromium := findChromium(t)
	dev := startDev(t, buildOrderlog(t))
	b := newBrowser(t, chromium)
	shots := screenshotDir(t)
	step := func(name string, f func(t *testing.T)) { // later steps build on earlier ones: stop at the first failure
		if !t.Run(name, f) {
			b.failureShot(t, shots, name)
			b.checkLog(t)
			t.FailNow()
		}
	}

	var offsets []uint64
	for i := range 5 {
		offsets = append(offsets, dev.produce(t, fmt.Sprintf(`{"topic":"demo","key":"k%d","payload":{"n":%d,"note":"hello"},`+
			`"headers":[{"key":"trace","value":"t-%d"}]}`, i, i, i)))
	}
	// A producer session at epoch 2 (every InitProducer bumps it) logs seq
	// 0, then sends seq 5: refused with OUT_OF_ORDER_SEQUENCE.
	dev.initProducer(t, "console-app")
	producer := dev.initProducer(t, "console-app")
	offsets = append(offsets, dev.produceAs(t, producer, 0, `{"topic":"demo","key":"from-producer","payload":"seq 0"}`))
	dev.refusedAs(t, producer, 5, `{"topic":"demo","key":"bad-seq","payload":"seq 5"}`, "OUT_OF_ORDER_SEQUENCE")
	binary := dev.produce(t, `{"topic":"bin","key":"raw","payload_base64":"AAH/QUI="}`) // 00 01 ff 'A' 'B'

	step("overview", func(t *testing.T) {
		b.run(t, chromedp.Navigate(dev.url("/ui/")),
			b.waitText("#committed", fmt.Sprint(binary+1)),
			b.waitText("#ready", "ready"),
			b.waitText(`#refused-codes tr[data-code="OUT_OF_ORDER_SEQUENCE"]`, "OUT_OF_ORDER_SEQUENCE"),
			b.waitText("#leader", dev.grpcAddr),
			b.waitText("#cluster tbody", dev.grpcAddr+" (this node)"),
			b.waitText("#cluster tbody", "serving"))
		if total := b.text(t, `#refused-codes tr[data-code="OUT_OF_ORDER_SEQUENCE"] td:nth-child(2)`); total != "1" {
			t.Errorf("refused frames of OUT_OF_ORDER_SEQUENCE since the start: %q, want 1", total)
		}
		b.screenshot(t, shots, "overview")
		// Keyboard: the first Tab reaches the skip link, which is visible when focused.
		b.run(t, chromedp.KeyEvent(kb.Tab))
		focused := evaluate[string](t, b, `document.activeElement.className`)
		if focused != "skip" {
			t.Errorf("first Tab focused %q, want the skip link", focused)
		}
		// The next Tab is in the navy header, where the focus ring is light.
		b.run(t, chromedp.KeyEvent(kb.Tab))
		if ring := evaluate[string](t, b, `getComputedStyle(document.activeElement).outlineColor`); ring != "rgb(247, 201, 72)" {
			t.Errorf("focus ring in the header is %s, want #f7c948", ring)
		}
		// The cards refresh every 2 s; a link in them keeps the focus.
		link := `#main .grid a[href="/ui/producers"]`
		b.tabTo(t, link, 30)
		b.run(t, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`window.focusedCard = document.querySelector(%q)`, link)),
			b.waitJS(fmt.Sprintf(`document.querySelector(%q) !== window.focusedCard`, link)))
		if !evaluate[bool](t, b, fmt.Sprintf(`document.activeElement.matches(%q)`, link)) {
			t.Errorf("the cards' refresh took the focus from their link")
		}
	})

	step("find_by_key", func(t *testing.T) {
		b.run(t, chromedp.Navigate(dev.url("/ui/messages")),
			chromedp.WaitVisible(chromedp.ID("q-key")),
			chromedp.SendKeys(chromedp.ID("q-topic"), "demo"),
			chromedp.SendKeys(chromedp.ID("q-key"), "k3"+kb.Enter), // submit with the keyboard
			b.waitText("#messages tbody", "k3"))
		if built := b.count(t, fmt.Sprintf(`#m-%d + tr td *`, offsets[3])); built != 0 {
			t.Errorf("the detail of k3 has %d elements before it is opened, want none", built)
		}
		b.run(t, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#m-%d button`, offsets[3]))))
		detail := b.text(t, fmt.Sprintf(`#m-%d + tr`, offsets[3]))
		for _, want := range []string{"\"n\": 3,\n  \"note\": \"hello\"", "trace", "t-3", "Producer seq"} {
			if !strings.Contains(detail, want) {
				t.Errorf("detail of k3 lacks %q:\n%s", want, detail)
			}
		}
		if rows := b.count(t, "#messages tbody tr[id]"); rows != 1 {
			t.Errorf("key k3 found %d messages, want 1", rows)
		}
		b.screenshot(t, shots, "messages-by-key")
	})

	step("permalink_offset", func(t *testing.T) {
		b.run(t, chromedp.Navigate(dev.url(fmt.Sprintf("/ui/messages?offset=%d", binary))),
			b.waitText(fmt.Sprintf(`#m-%d + tr`, binary), "00 01 ff 41 42"))
		detail := b.text(t, fmt.Sprintf(`#m-%d + tr`, binary))
		for _, want := range []string{"Bytes (5)", "AAH/QUI=", "raw"} {
			if !strings.Contains(detail, want) {
				t.Errorf("detail of offset %d lacks %q:\n%s", binary, want, detail)
			}
		}
		b.screenshot(t, shots, "messages-by-offset")
	})

	step("producer_link", func(t *testing.T) {
		// A message's producer id links to its producer's messages in the
		// message's topic; with a filter, Older and Last say they jump by offsets.
		link := fmt.Sprintf(`#m-%d + tr a[href^="/ui/messages?producer="]`, offsets[5])
		b.run(t, chromedp.Navigate(dev.url(fmt.Sprintf("/ui/messages?offset=%d", offsets[5]))), b.waitJS(fmt.Sprintf(`!!document.querySelector(%q)`, link)))
		href := evaluate[string](t, b, fmt.Sprintf(`document.querySelector(%q).getAttribute("href")`, link))
		if want := fmt.Sprintf("/ui/messages?producer=%d&topic=demo", producer.ID); href != want {
			t.Errorf("producer link %q, want %q", href, want)
		}
		b.run(t, chromedp.Click(chromedp.CSS(link)), b.waitText("#messages tbody", "from-producer"))
		if rows := b.count(t, "#messages tbody tr[id]"); rows != 1 {
			t.Errorf("producer %d's messages in demo: %d rows, want 1", producer.ID, rows)
		}
		if last := b.text(t, "#q-last"); last != "Jump to C\u221250" {
			t.Errorf("Last under a filter reads %q, want it to say it jumps to C\u221250", last)
		}
	})

	step("tail", func(t *testing.T) {
		b.run(t, chromedp.Navigate(dev.url("/ui/tail?topic=demo")), b.waitText("#t-status", "Following topic demo"))
		for i := range 3 {
			dev.produce(t, fmt.Sprintf(`{"topic":"demo","key":"tail-%d","payload":"live %d"}`, i, i))
		}
		b.run(t, b.waitText("#t-rows", "tail-2"), b.waitText("#t-rows", "tail-0"))
		b.screenshot(t, shots, "tail")
		// The tail follows the URL's topic, not the field's until Follow.
		b.run(t, chromedp.SetValue(chromedp.ID("t-topic"), "bin"))
		dev.produce(t, `{"topic":"demo","key":"tail-3","payload":"still demo"}`)
		b.run(t, b.waitText("#t-rows", "tail-3"))
	})

	step("tail_topic_skips_none", func(t *testing.T) {
		// Paused, then more than a page reads (reader.PageSegments) of
		// another topic with one of demo's in it: the demo tail reads on
		// from its short pages and skips none of demo's messages.
		b.run(t, chromedp.Click(chromedp.ID("t-pause")), b.waitText("#t-pause", "Resume"))
		dev.produceMany(t, "flood", 1100)
		dev.produce(t, `{"topic":"demo","key":"mid-flood","payload":1}`)
		dev.produceMany(t, "flood", 100)
		last := dev.produce(t, `{"topic":"demo","key":"after-flood","payload":2}`)
		b.run(t, chromedp.Click(chromedp.ID("t-pause")),
			b.waitJS(fmt.Sprintf(`!!document.querySelector('#t-rows tr[data-offset="%d"]')`, last)))
		rows := b.text(t, "#t-rows")
		if !strings.Contains(rows, "mid-flood") || strings.Contains(rows, "skipped offsets") {
			t.Errorf("the demo tail skipped messages of demo:\n%s", rows)
		}
	})

	step("consumer_lag", func(t *testing.T) {
		member := dev.joinGroup(t, "billing", "demo")
		committed := dev.committed(t)
		dev.commitAll(t, "billing", member, committed)
		lagIs := `Number((document.querySelector("#g-lag") || {textContent: "-1"}).textContent.replace(/,/g, ""))`
		b.run(t, chromedp.Navigate(dev.url("/ui/consumers?group=billing")),
			b.waitJS(lagIs+" === 0"))
		for i := range 4 {
			dev.produce(t, fmt.Sprintf(`{"topic":"demo","key":"lag-%d","payload":%d}`, i, i))
		}
		// Lag is measured against C per partition: each new message adds
		// its offset distance to its partition's lag, so it only grows.
		b.run(t, b.waitJS(lagIs+" > 0"))
		b.screenshot(t, shots, "consumer-group")
	})

	step("consumer_groups", func(t *testing.T) {
		row := `#g-list tr[data-group="billing"]`
		lagIs := fmt.Sprintf(`Number((document.querySelector(%q) || {textContent: "-1"}).textContent.replace(/,/g, ""))`, row+" td.lag")
		b.run(t, chromedp.Navigate(dev.url("/ui/consumers")), b.waitJS(lagIs+" > 0"))
		if text := b.text(t, row); !strings.Contains(text, "demo") {
			t.Errorf("billing's row %q does not name its topic", text)
		}
		b.checkFocusable(t)
		b.screenshot(t, shots, "consumer-groups")
		b.tabTo(t, row+" a", 30) // the group's link, reached and followed with the keyboard
		b.run(t, chromedp.KeyEvent(kb.Enter), b.waitJS(`!!document.querySelector("#g-lag")`))
	})

	step("producers", func(t *testing.T) {
		row := `#p-list tr[data-producer="console-app"]`
		b.run(t, chromedp.Navigate(dev.url("/ui/producers")), b.waitText(row+" td.epoch", "2"))
		if seq := b.text(t, row+" td.seq"); seq != "0" {
			t.Errorf("console-app's last durable seq shows %q, want 0", seq)
		}
		if owner := b.text(t, row); !strings.Contains(owner, "(this node)") {
			t.Errorf("console-app's row %q does not say this node owns it", owner)
		}
		if note := b.text(t, "#p-source"); !strings.Contains(note, "etcd") {
			t.Errorf("the page does not say which fields come from etcd: %q", note)
		}
		b.checkFocusable(t)
		b.tabTo(t, row+" a", 30)
		b.screenshot(t, shots, "producers")
	})

	step("topics", func(t *testing.T) {
		b.run(t, chromedp.Navigate(dev.url("/ui/topics?topic=demo")), b.waitText("#topic-detail", "Partitions of demo"),
			b.waitText("#topics", "bin"))
		b.screenshot(t, shots, "topics")
	})

	var holeEnd uint64 // where the hole the kill leaves ends: the next message's offset
	step("hole_after_sigkill", func(t *testing.T) {
		b.run(t, chromedp.Navigate("about:blank")) // no page polls a node that is down
		before := dev.committed(t)
		dev.kill9(t)
		dev.start(t)
		after := dev.produce(t, `{"topic":"demo","key":"after-crash","payload":"back"}`)
		if after <= before {
			t.Fatalf("offset after restart %d, want above C before the kill %d", after, before)
		}
		b.run(t, chromedp.Navigate(dev.url(fmt.Sprintf("/ui/messages?offset=%d&limit=20", before))),
			b.waitText("#messages tr.hole", "hole: offsets"),
			b.waitText("#messages", "after-crash"))
		hole := b.text(t, "#messages tr.hole")
		if !strings.Contains(hole, fmt.Sprintf("to %s", groupDigits(after-1))) {
			t.Errorf("hole row %q does not end just before the next message at %d", hole, after)
		}
		b.screenshot(t, shots, "hole")
		holeEnd = after
	})

	step("archive", func(t *testing.T) {
		// The archive's files come to hold the hole too, a second or two
		// after C passes it (dev cuts a file once it is a second old).
		b.run(t, chromedp.Navigate(dev.url("/ui/archive")),
			b.waitJS(fmt.Sprintf(`[...document.querySelectorAll("#a-files td.holes")].some(td => td.textContent.includes(%q))`,
				"to "+groupDigits(holeEnd-1))))
		if tText := b.text(t, "#a-t"); tText == "" || tText == "0" {
			t.Errorf("archived watermark T shows %q", tText)
		}
		b.checkFocusable(t)
		b.screenshot(t, shots, "archive")
	})

	b.checkLog(t)
}

// groupDigits renders n as the console does (en-US thousands separators).
func groupDigits(n uint64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func screenshotDir(t *testing.T) string {
	dir := os.Getenv(artifactsEnv)
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser is one headless Chromium tab and what its console reported.
type browser struct {
	ctx context.Context
	mu  struct {
		sync.Mutex
		problems []string // errors, warnings and exceptions, in order
	}
}

func newBrowser(t *testing.T, chromium string) *browser {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	b := &browser{ctx: ctx}
	b.run(t, chromedp.Navigate("about:blank")) // starts the browser: no timeout on this first call
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			switch m.Type {
			case chromedp.ConsoleError, chromedp.ConsoleWarning, chromedp.ConsoleException:
				b.mu.Lock()
				b.mu.problems = append(b.mu.problems, fmt.Sprintf("%s (%s %s)", m, m.Source, m.URL))
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// checkLog fails the test for anything the page logged as an error or a
// warning, exceptions and failed loads included.
func (b *browser) checkLog(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.mu.problems {
		t.Errorf("browser console: %s", p)
	}
}

func (b *browser) run(t *testing.T, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx := b.ctx
	if chromedp.FromContext(ctx).Target != nil { // the first call starts the browser, which a timeout would stop
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	if err := chromedp.Do(ctx, actions...); err != nil {
		body, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		t.Fatalf("browser: %v\npage text:\n%s", err, body)
	}
}

// waitText waits until the element selector matches contains substr.
func (b *browser) waitText(selector, substr string) chromedp.Action[chromedp.Void] {
	return b.waitJS(fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.includes(%q); })()`,
		selector, substr))
}

// waitJS waits until expression is true.
func (b *browser) waitJS(expression string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expression, chromedp.WithPollingTimeout(15*time.Second))
}

func evaluate[T any](t *testing.T, b *browser, expression string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expression))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expression, err)
	}
	return v
}

func (b *browser) text(t *testing.T, selector string) string {
	t.Helper()
	return evaluate[string](t, b, fmt.Sprintf(`(document.querySelector(%q) || {}).innerText || ""`, selector))
}

func (b *browser) count(t *testing.T, selector string) int {
	t.Helper()
	return evaluate[int](t, b, fmt.Sprintf(`document.querySelectorAll(%q).length`, selector))
}

// checkFocusable fails for any link, button or field in the page that is
// kept out of the keyboard's reach (a negative tabIndex, a link without
// href).
func (b *browser) checkFocusable(t *testing.T) {
	t.Helper()
	unreachable := evaluate[[]string](t, b, `[...document.querySelectorAll("main a, main button, main input, main select, main summary")]
		.filter(e => e.tabIndex < 0 || (e.tagName === "A" && !e.hasAttribute("href"))).map(e => e.outerHTML.slice(0, 120))`)
	for _, e := range unreachable {
		t.Errorf("not reachable with the keyboard: %s", e)
	}
}

// tabTo presses Tab until the focus is on the element selector names,
// failing after most presses.
func (b *browser) tabTo(t *testing.T, selector string, most int) {
	t.Helper()
	check := fmt.Sprintf(`!!document.activeElement && document.activeElement.matches(%q)`, selector)
	for range most {
		if evaluate[bool](t, b, check) {
			return
		}
		b.run(t, chromedp.KeyEvent(kb.Tab))
	}
	if !evaluate[bool](t, b, check) {
		t.Fatalf("%d Tabs did not reach %s (focus on %s)", most, selector, evaluate[string](t, b, `document.activeElement ? document.activeElement.outerHTML.slice(0, 120) : "nothing"`))
	}
}

func (b *browser) screenshot(t *testing.T, dir, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
}

// failureShot saves the page a step failed on as FAIL-<step>.png; a
// browser that cannot take it is logged, not failed again.
func (b *browser) failureShot(t *testing.T, dir, step string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "FAIL-"+step+".png"), png, 0o644)
	}
	if err != nil {
		t.Logf("screenshot of the failed step %s: %v", step, err)
		return
	}
	t.Logf("screenshot of the failed step: %s", filepath.Join(dir, "FAIL-"+step+".png"))
}

// joinGroup holds a membership of group on topic for the rest of the test
// through the HTTP stream, and returns its assignment.
func (d *devProcess) joinGroup(t *testing.T, group, topic string) assignment {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.url("/v1/consumers/"+group+"/stream?topic="+topic), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 16<<20)
	for lines.Scan() {
		var line struct {
			Assignment *assignment     `json:"assignment"`
			Error      json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(lines.Bytes(), &line); err != nil || line.Error != nil {
			t.Fatalf("stream line %s: %v", lines.Text(), err)
		}
		if line.Assignment != nil && len(line.Assignment.Partitions) > 0 {
			go func() { // keep reading: a member that reads nothing is taken as gone
				for lines.Scan() {
				}
			}()
			return *line.Assignment
		}
	}
	t.Fatalf("stream ended without an assignment: %v", lines.Err())
	return assignment{}
}

type assignment struct {
	MemberID   string `json:"member_id"`
	Generation uint64 `json:"generation"`
	Partitions []struct {
		Topic     string `json:"topic"`
		Partition uint32 `json:"partition"`
	} `json:"partitions"`
}

// commitAll commits offset on every partition of the assignment.
func (d *devProcess) commitAll(t *testing.T, group string, a assignment, offset uint64) {
	t.Helper()
	type partitionOffset struct {
		Topic     string `json:"topic"`
		Partition uint32 `json:"partition"`
		Offset    uint64 `json:"offset"`
	}
	body := struct {
		MemberID   string            `json:"member_id"`
		Generation uint64            `json:"generation"`
		Offsets    []partitionOffset `json:"offsets"`
	}{MemberID: a.MemberID, Generation: a.Generation}
	for _, p := range a.Partitions {
		body.Offsets = append(body.Offsets, partitionOffset{Topic: p.Topic, Partition: p.Partition, Offset: offset})
	}
	text, _ := json.Marshal(body)
	d.post(t, "/v1/consumers/"+group+"/offsets", string(text), nil)
}
