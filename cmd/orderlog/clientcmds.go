package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
)

func newFlagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: orderlog %s\n\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

func runProduce(args []string) error {
	fs := newFlagSet("produce", "produce [flags] [FILE...]\n\nSends each line of the files (or of stdin) as one message, through an\nidempotent producer session: a retry after a broken connection never logs a line twice.")
	var cf clientFlags
	cf.register(fs)
	topic := fs.String("topic", "default", "topic of every message")
	key := fs.String("key", "", "key of every message")
	name := fs.String("producer", "", "producer name (default: cli-<host>-<pid>); a run under the same name fences the one before and numbers its lines after it (lines sent again are logged again)")
	frame := fs.Int("frame", 100, "lines per request frame (a frame also ends at 4 MiB, and 50 ms after its first line)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return cf.withClient(func(ctx context.Context, cl *client.Client) error {
		if *name == "" {
			host, _ := os.Hostname()
			*name = fmt.Sprintf("cli-%s-%d", host, os.Getpid())
		}
		producer, err := cl.NewProducer(ctx, *name, client.ProducerOptions{})
		if err != nil {
			return err
		}
		defer producer.Close()
		inputs, err := openInputs(fs.Args())
		if err != nil {
			return err
		}
		progress := newProgress(os.Stderr)
		acked := waitAcks(ctx)
		// fail reports, before an error ends the command, which lines are
		// known to be logged: acks come in input order, so lines 1..count.
		fail := func(err error) error {
			result, _ := acked.close()
			reportPartial(os.Stderr, result)
			return err
		}
		lines := readLines(inputs)
		var batch []*orderlogpb.Message
		batchBytes := 0
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			pending, err := producer.Send(ctx, batch...)
			if err != nil {
				return err
			}
			if err := acked.add(pending); err != nil {
				return err
			}
			progress.add(len(batch))
			batch, batchBytes = nil, 0
			return nil
		}
		// A partial frame goes out produceFrameWait after its first line, so
		// that a slow stream of lines (tail -f) is not held back.
		idle := time.NewTimer(time.Hour)
		defer idle.Stop()
	read:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					break read
				}
				if l.err != nil {
					return fail(l.err)
				}
				if len(batch) == 0 {
					idle.Reset(produceFrameWait) // a frame waits at most this long for more lines
				}
				batch = append(batch, &orderlogpb.Message{Topic: *topic, Key: []byte(*key), Value: l.text})
				batchBytes += len(l.text)
				if len(batch) >= *frame || batchBytes >= produceFrameBytes {
					if err := flush(); err != nil {
						return fail(err)
					}
				}
			case <-idle.C:
				if err := flush(); err != nil {
					return fail(err)
				}
			case <-ctx.Done():
				return fail(ctx.Err())
			}
		}
		if err := flush(); err != nil {
			return fail(err)
		}
		result, err := acked.close()
		if err != nil {
			reportPartial(os.Stderr, result)
			return err
		}
		progress.done()
		if result.count == 0 {
			fmt.Println("produced 0 messages")
			return nil
		}
		if result.offsets > 0 {
			// Acknowledged means durable; wait until it is also committed so a
			// read right after this command sees it.
			waitCtx, cancelWait := context.WithTimeout(ctx, 5*time.Second)
			_ = cl.WaitCommitted(waitCtx, result.last+1) // best effort: the messages are durable either way
			cancelWait()
		}
		switch {
		case result.offsets == result.count:
			fmt.Printf("produced %d messages, offsets %d..%d\n", result.count, result.first, result.last)
		case result.offsets == 0:
			fmt.Printf("produced %d messages, all logged before (their offsets are older than the dedup window)\n", result.count)
		default:
			fmt.Printf("produced %d messages, offsets %d..%d; %d were logged before at offsets older than the dedup window\n",
				result.count, result.first, result.last, result.count-result.offsets)
		}
		return nil
	})
}

// reportPartial says, for a produce that an error ended, which input lines
// were acknowledged (durable) and that the later ones are not confirmed.
func reportPartial(w io.Writer, result ackResult) {
	switch {
	case result.count == 0:
		fmt.Fprintln(w, "orderlog produce: no line was acknowledged; lines from 1 on are not confirmed")
	case result.offsets == 0:
		fmt.Fprintf(w, "orderlog produce: lines 1..%d acknowledged (logged before); lines from %d on are not confirmed\n", result.count, result.count+1)
	default:
		fmt.Fprintf(w, "orderlog produce: lines 1..%d acknowledged, at offsets %d..%d; lines from %d on are not confirmed\n",
			result.count, result.first, result.last, result.count+1)
	}
}

// produceFrameBytes and produceFrameWait bound a produce frame besides its
// line count: a frame of 100 long lines must stay far below the gRPC
// message limit, and a partial frame should not wait for more input long.
const (
	produceFrameBytes = 4 << 20
	produceFrameWait  = 50 * time.Millisecond
)

// line is one input line, or the error that ended the input.
type line struct {
	text []byte
	err  error
}

// readLines scans every input in turn into a channel, closed at the end. It
// reads in its own goroutine, so that Ctrl-C ends a produce waiting on a
// terminal.
func readLines(inputs []io.Reader) <-chan line {
	out := make(chan line, 16) // read ahead a little, whatever the lines' size
	go func() {
		defer close(out)
		for _, in := range inputs {
			scanner := bufio.NewScanner(in)
			scanner.Buffer(make([]byte, 64<<10), 16<<20)
			for scanner.Scan() {
				out <- line{text: append([]byte(nil), scanner.Bytes()...)}
			}
			if err := scanner.Err(); err != nil {
				out <- line{err: err}
				return
			}
		}
	}()
	return out
}

// ackWaiter waits for sent frames in order as they are answered, so that
// neither they nor their lines pile up until the end of the input.
type ackWaiter struct {
	frames chan *client.Pending
	failed chan struct{} // closed once err is set
	done   chan struct{}
	result ackResult
	err    error
}

// ackResult sums up the acks: count messages, offsets of them with a known
// offset, first and last of those.
type ackResult struct {
	count, offsets int
	first, last    uint64
}

func waitAcks(ctx context.Context) *ackWaiter {
	w := &ackWaiter{frames: make(chan *client.Pending, 1024), failed: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for pending := range w.frames {
			acks, err := pending.Wait(ctx)
			if err != nil {
				w.err = err
				close(w.failed)
				for range w.frames { // until close: add never blocks
				}
				return
			}
			for _, ack := range acks {
				w.result.count++
				if ack.DuplicateWithoutOffset {
					continue // logged before; the offset is no longer known
				}
				if w.result.offsets == 0 {
					w.result.first = ack.Offset
				}
				w.result.last = ack.Offset
				w.result.offsets++
			}
		}
	}()
	return w
}

// add hands a sent frame to the waiter; it fails once a frame has failed.
func (w *ackWaiter) add(pending *client.Pending) error {
	select {
	case <-w.failed:
		return w.err
	default:
	}
	w.frames <- pending
	return nil
}

// close waits for every frame handed over and returns the sum.
func (w *ackWaiter) close() (ackResult, error) {
	close(w.frames)
	<-w.done
	return w.result, w.err
}

func openInputs(paths []string) ([]io.Reader, error) {
	if len(paths) == 0 {
		return []io.Reader{os.Stdin}, nil
	}
	inputs := make([]io.Reader, 0, len(paths))
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		inputs = append(inputs, f) // closed at exit
	}
	return inputs, nil
}

func runRead(args []string) error {
	fs := newFlagSet("read", "read [flags]\n\nPrints messages from --offset on, in global order, one JSON object per line;\nholes are printed as {\"skipped\":...} lines.")
	var cf clientFlags
	cf.register(fs)
	from := fs.Uint64("offset", 0, "first offset to read")
	limit := fs.Uint("limit", 100, "most messages to print (0 = up to the committed watermark)")
	topic := fs.String("topic", "", "only this topic")
	key := fs.String("key", "", "only this key")
	producer := fs.Uint64("producer", 0, "only this producer's messages (its id; 0 = any)")
	fromTime := fs.String("from-time", "", "only messages ingested at or after this time (RFC 3339)")
	toTime := fs.String("to-time", "", "only messages ingested before this time (RFC 3339)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fromMicros, err := parseTimeFlag("from-time", *fromTime)
	if err != nil {
		return err
	}
	toMicros, err := parseTimeFlag("to-time", *toTime)
	if err != nil {
		return err
	}
	if *limit > math.MaxUint32 {
		return fmt.Errorf("--limit %d is too large (at most %d)", *limit, uint32(math.MaxUint32))
	}
	return cf.withClient(func(ctx context.Context, cl *client.Client) error {
		out := newPagePrinter(os.Stdout)
		print := out.print
		if *topic != "" || *key != "" || *producer != 0 || fromMicros != 0 || toMicros != 0 {
			req := &orderlogpb.QueryRequest{FromOffset: *from, Limit: uint32(*limit), Topic: *topic, ProducerId: *producer,
				FromTimeUs: fromMicros, ToTimeUs: toMicros}
			if *key != "" {
				req.Key = []byte(*key)
			}
			return cl.Query(ctx, req, print)
		}
		return cl.ReadBorrowed(ctx, *from, uint32(*limit), print) // print writes each page out
	})
}

func runTail(args []string) error {
	fs := newFlagSet("tail", "tail [flags]\n\nFollows the log from --offset (default: the committed watermark) and prints\nevery message as it is committed, until interrupted.")
	var cf clientFlags
	cf.register(fs)
	from := fs.Int64("offset", -1, "first offset (-1 = the current committed watermark)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return cf.withClient(func(ctx context.Context, cl *client.Client) error {
		// A tail waits out a node that is down; say so rather than sit
		// silent when the address is wrong.
		probe, cancelProbe := context.WithTimeout(ctx, 2*time.Second)
		if _, err := cl.Status(probe); err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "orderlog tail: %s does not answer yet (%v); waiting for it\n", cf.addr, err)
		}
		cancelProbe()
		start := uint64(*from)
		if *from < 0 {
			// A node that has not yet caught up with the commit map
			// reports epoch 0 and a C that is not the log's.
			if err := cl.WaitReady(ctx); err != nil {
				return err
			}
			status, err := cl.Status(ctx)
			if err != nil {
				return err
			}
			start = status.Committed
		}
		err := cl.Tail(ctx, start, newPagePrinter(os.Stdout).print)
		if ctx.Err() != nil {
			return nil // interrupted: a normal end of a tail
		}
		return err
	})
}

// printedMessage is one message as read and tail print it: every byte
// field as text when it is UTF-8, else as base64 (`…_base64`), so the
// output holds the stored bytes exactly.
type printedMessage struct {
	Offset          uint64          `json:"offset"`
	Topic           string          `json:"topic"`
	Key             string          `json:"key,omitempty"`
	KeyBase64       string          `json:"key_base64,omitempty"`
	Value           *string         `json:"value,omitempty"`
	ValueBase64     string          `json:"value_base64,omitempty"`
	Headers         []printedHeader `json:"headers,omitempty"`
	MessageID       string          `json:"message_id,omitempty"`
	MessageIDBase64 string          `json:"message_id_base64,omitempty"`
	ProducerID      uint64          `json:"producer_id,omitempty"`
	ProducerSeq     *uint64         `json:"producer_seq,omitempty"`
	IngestTime      string          `json:"ingest_time"`
	ClientTimeUS    int64           `json:"client_time_us,omitempty"`
}

type printedHeader struct {
	Key         string  `json:"key"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 string  `json:"value_base64,omitempty"`
}

// textOrBase64 is b as text if it is UTF-8, else as base64.
func textOrBase64(b []byte) (text *string, base64Text string) {
	if utf8.Valid(b) {
		s := string(b)
		return &s, ""
	}
	return nil, base64.StdEncoding.EncodeToString(b)
}

func toPrinted(m *orderlogpb.StoredMessage) printedMessage {
	msg := m.Message
	p := printedMessage{Offset: m.Offset, Topic: msg.GetTopic(), ProducerID: m.ProducerId, ProducerSeq: producerSeq(m),
		IngestTime: time.UnixMicro(m.IngestTimeUs).UTC().Format(time.RFC3339Nano), ClientTimeUS: msg.GetClientTimeUs()}
	p.Value, p.ValueBase64 = textOrBase64(msg.GetValue())
	if key, b64 := textOrBase64(msg.GetKey()); key != nil {
		p.Key = *key
	} else {
		p.KeyBase64 = b64
	}
	if id, b64 := textOrBase64(msg.GetMessageId()); id != nil {
		p.MessageID = *id
	} else {
		p.MessageIDBase64 = b64
	}
	for _, h := range msg.GetHeaders() {
		ph := printedHeader{Key: h.Key}
		ph.Value, ph.ValueBase64 = textOrBase64(h.Value)
		p.Headers = append(p.Headers, ph)
	}
	return p
}

// printPage prints a page's messages and holes in offset order through
// encoding/json: the reference rendering. Read and tail print with
// pagePrinter, which must print exactly the same bytes
// (TestPagePrinterMatchesEncodingJSON).
func printPage(out *json.Encoder, page *client.Page) error {
	holes := page.Skipped
	printHolesBefore := func(offset uint64) error {
		for len(holes) > 0 && holes[0].First < offset {
			skipped := map[string]any{"first": holes[0].First, "end": holes[0].End}
			if holes[0].Reason != "" {
				skipped["reason"] = holes[0].Reason
			}
			if err := out.Encode(map[string]any{"skipped": skipped}); err != nil {
				return err
			}
			holes = holes[1:]
		}
		return nil
	}
	for _, m := range page.Messages {
		if err := printHolesBefore(m.Offset); err != nil {
			return err
		}
		if err := out.Encode(toPrinted(m)); err != nil {
			return err
		}
	}
	return printHolesBefore(^uint64(0))
}

// pagePrinter prints pages as printPage does, one JSON object per line,
// rendering each page by hand into one buffer and writing it with one
// call: encoding/json's reflection and escaping, and a write per line,
// took most of `orderlog read`'s time (docs/notes/read-bench.md). A page
// printed is on its way out before the next is read, so a tail is not held
// back by buffering.
type pagePrinter struct {
	out io.Writer
	buf []byte // reused for every page
}

func newPagePrinter(out io.Writer) *pagePrinter { return &pagePrinter{out: out} }

// print writes a page's messages and holes in offset order.
func (p *pagePrinter) print(page *client.Page) error {
	b := p.buf[:0]
	holes := page.Skipped
	for _, m := range page.Messages {
		for len(holes) > 0 && holes[0].First < m.Offset {
			b = appendSkipped(b, holes[0])
			holes = holes[1:]
		}
		b = appendPrinted(b, m)
	}
	for _, h := range holes {
		b = appendSkipped(b, h)
	}
	p.buf = b
	_, err := p.out.Write(b)
	return err
}

// appendSkipped appends a hole's line as printPage prints it (from a
// map: the keys sorted).
func appendSkipped(b []byte, h *orderlogpb.SkippedRange) []byte {
	b = append(b, `{"skipped":{"end":`...)
	b = strconv.AppendUint(b, h.End, 10)
	b = append(b, `,"first":`...)
	b = strconv.AppendUint(b, h.First, 10)
	if h.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, h.Reason)
	}
	return append(b, "}}\n"...)
}

// appendPrinted appends m's line as encoding/json prints toPrinted(m): the
// same fields in the same order, with the same ones left out.
func appendPrinted(b []byte, m *orderlogpb.StoredMessage) []byte {
	msg := m.Message
	b = append(b, `{"offset":`...)
	b = strconv.AppendUint(b, m.Offset, 10)
	b = append(b, `,"topic":`...)
	b = appendJSONString(b, msg.GetTopic())
	b = appendTextOrBase64(b, "key", msg.GetKey(), true)
	b = appendTextOrBase64(b, "value", msg.GetValue(), false)
	if headers := msg.GetHeaders(); len(headers) > 0 {
		b = append(b, `,"headers":[`...)
		for i, h := range headers {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"key":`...)
			b = appendJSONString(b, h.Key)
			b = appendTextOrBase64(b, "value", h.Value, false)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendTextOrBase64(b, "message_id", msg.GetMessageId(), true)
	if m.ProducerId != 0 { // producerSeq is nil exactly then
		b = append(b, `,"producer_id":`...)
		b = strconv.AppendUint(b, m.ProducerId, 10)
		b = append(b, `,"producer_seq":`...)
		b = strconv.AppendUint(b, m.ProducerSeq, 10)
	}
	// RFC 3339 holds no byte JSON escapes.
	b = append(b, `,"ingest_time":"`...)
	b = time.UnixMicro(m.IngestTimeUs).UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if t := msg.GetClientTimeUs(); t != 0 {
		b = append(b, `,"client_time_us":`...)
		b = strconv.AppendInt(b, t, 10)
	}
	return append(b, "}\n"...)
}

// appendTextOrBase64 appends field name with v as text if it is UTF-8,
// else field name_base64 with v in base64 (textOrBase64); omitEmpty
// leaves an empty text out (a string field, not a *string).
func appendTextOrBase64(b []byte, name string, v []byte, omitEmpty bool) []byte {
	if !utf8.Valid(v) {
		b = append(append(append(b, `,"`...), name...), `_base64":"`...)
		return append(base64.StdEncoding.AppendEncode(b, v), '"')
	}
	if omitEmpty && len(v) == 0 {
		return b
	}
	b = append(append(append(b, `,"`...), name...), `":`...)
	return appendJSONString(b, v)
}

// jsonVerbatim is 1 for the bytes encoding/json writes as they are in a
// string with HTML escaping on (json.Encoder's default): printable ASCII
// but '"', '\\', '<', '>' and '&'.
var jsonVerbatim = func() (set [256]uint8) {
	for c := 0x20; c <= 0x7f; c++ {
		if !strings.ContainsRune(`"\<>&`, rune(c)) {
			set[c] = 1
		}
	}
	return set
}()

// verbatimRun is the length of s's leading run of bytes jsonVerbatim
// holds, taken eight bytes per branch: a 1 KiB value spent most of its
// time on a branch per byte.
func verbatimRun[T []byte | string](s T) int {
	v := &jsonVerbatim
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if v[s[i]]&v[s[i+1]]&v[s[i+2]]&v[s[i+3]]&v[s[i+4]]&v[s[i+5]]&v[s[i+6]]&v[s[i+7]] == 0 {
			break
		}
	}
	for ; i < len(s) && v[s[i]] == 1; i++ {
	}
	return i
}

// appendJSONString appends s as a JSON string exactly as encoding/json
// does with HTML escaping on (its appendString): other ASCII below 0x20
// and '<', '>', '&' as \u00XX, bytes that are not UTF-8 as \ufffd, and
// U+2028 and U+2029 escaped.
func appendJSONString[T []byte | string](b []byte, s T) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if n := verbatimRun(s[i:]); n > 0 {
			i += n
			continue
		}
		if c := s[i]; c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(string(s[i:min(len(s), i+utf8.UTFMax)]))
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}

func runStatus(args []string) error {
	fs := newFlagSet("status", "status [flags]\n\nPrints the sequencer epoch, the committed watermark C, store sizes and the\ncluster's nodes (a list --addr accepts).")
	var cf clientFlags
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	return cf.withClient(func(ctx context.Context, cl *client.Client) error {
		status, err := cl.Status(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("epoch        %d\ncommitted    %d\nreserved     %d\nhole offsets %d\nproducers    %d\nstore bytes  %d\nnodes        %s\n",
			status.Epoch, status.Committed, status.Reserved, status.HoleOffsets, status.Producers, status.StoreBytes,
			strings.Join(status.Endpoints, ","))
		return nil
	})
}

// producerSeq is the message's producer seq, or nil for a message sent
// without a producer session.
func producerSeq(m *orderlogpb.StoredMessage) *uint64 {
	if m.ProducerId == 0 {
		return nil
	}
	seq := m.ProducerSeq
	return &seq
}

// parseTimeFlag reads an RFC 3339 time flag as microseconds since the
// Unix epoch (0 when empty).
func parseTimeFlag(name, value string) (int64, error) {
	if value == "" {
		return 0, nil
	}
	t, err := time.Parse(time.RFC3339Nano, value)
	if err != nil {
		return 0, fmt.Errorf("--%s %q: want an RFC 3339 time such as 2026-12-03T08:00:00Z", name, value)
	}
	return t.UnixMicro(), nil
}
