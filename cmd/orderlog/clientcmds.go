package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
)

// clientFlags are the flags every client verb takes.
type clientFlags struct {
	addr    string
	timeout time.Duration
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "127.0.0.1:7070", "gRPC address of an orderlog node")
	fs.DurationVar(&c.timeout, "timeout", 0, "give up after this long (0 = no limit)")
}

// withClient connects and runs fn with a context that ends on Ctrl-C or
// after --timeout.
func (c *clientFlags) withClient(fn func(ctx context.Context, cl *client.Client) error) error {
	cl, err := client.Dial(c.addr)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	if c.timeout > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeout(ctx, c.timeout)
		defer cancelTimeout()
	}
	return fn(ctx, cl)
}

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
	name := fs.String("producer", "", "producer name (default: cli-<host>-<pid>); reuse it to continue a session")
	frame := fs.Int("frame", 100, "lines per request frame")
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
		var sent []*client.Pending
		for _, in := range inputs {
			scanner := bufio.NewScanner(in)
			scanner.Buffer(make([]byte, 64<<10), 16<<20)
			var batch []*orderlogpb.Message
			flush := func() error {
				if len(batch) == 0 {
					return nil
				}
				pending, err := producer.Send(ctx, batch...)
				if err != nil {
					return err
				}
				sent = append(sent, pending)
				progress.add(len(batch))
				batch = nil
				return nil
			}
			for scanner.Scan() {
				line := append([]byte(nil), scanner.Bytes()...)
				batch = append(batch, &orderlogpb.Message{Topic: *topic, Key: []byte(*key), Value: line})
				if len(batch) >= *frame {
					if err := flush(); err != nil {
						return err
					}
				}
			}
			if err := scanner.Err(); err != nil {
				return err
			}
			if err := flush(); err != nil {
				return err
			}
		}
		var first, last uint64
		count := 0
		for _, pending := range sent {
			acks, err := pending.Wait(ctx)
			if err != nil {
				return err
			}
			for _, ack := range acks {
				if count == 0 {
					first = ack.Offset
				}
				last = ack.Offset
				count++
			}
		}
		progress.done()
		if count > 0 {
			// Acknowledged means durable; wait until it is also committed so a
			// read right after this command sees it.
			waitCtx, cancelWait := context.WithTimeout(ctx, 5*time.Second)
			_ = cl.WaitCommitted(waitCtx, last+1) // best effort: the messages are durable either way
			cancelWait()
			fmt.Printf("produced %d messages, offsets %d..%d\n", count, first, last)
		} else {
			fmt.Println("produced 0 messages")
		}
		return nil
	})
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	return cf.withClient(func(ctx context.Context, cl *client.Client) error {
		out := json.NewEncoder(os.Stdout)
		print := func(page *client.Page) error { return printPage(out, page) }
		if *topic != "" || *key != "" {
			return cl.Query(ctx, &orderlogpb.QueryRequest{FromOffset: *from, Limit: uint32(*limit), Topic: *topic, Key: []byte(*key)}, print)
		}
		return cl.Read(ctx, *from, uint32(*limit), print)
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
		start := uint64(*from)
		if *from < 0 {
			status, err := cl.Status(ctx)
			if err != nil {
				return err
			}
			start = status.Committed
		}
		out := json.NewEncoder(os.Stdout)
		err := cl.Tail(ctx, start, func(page *client.Page) error { return printPage(out, page) })
		if ctx.Err() != nil {
			return nil // interrupted: a normal end of a tail
		}
		return err
	})
}

type printedMessage struct {
	Offset      uint64  `json:"offset"`
	Topic       string  `json:"topic"`
	Key         string  `json:"key,omitempty"`
	Value       string  `json:"value"`
	ProducerID  uint64  `json:"producer_id,omitempty"`
	ProducerSeq *uint64 `json:"producer_seq,omitempty"`
	IngestTime  string  `json:"ingest_time"`
}

// printPage prints a page's messages and holes in offset order.
func printPage(out *json.Encoder, page *client.Page) error {
	holes := page.Skipped
	printHolesBefore := func(offset uint64) error {
		for len(holes) > 0 && holes[0].First < offset {
			if err := out.Encode(map[string]any{"skipped": map[string]uint64{"first": holes[0].First, "end": holes[0].End}}); err != nil {
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
		err := out.Encode(printedMessage{
			Offset: m.Offset, Topic: m.Message.GetTopic(), Key: string(m.Message.GetKey()),
			Value: string(m.Message.GetValue()), ProducerID: m.ProducerId, ProducerSeq: producerSeq(m),
			IngestTime: time.UnixMicro(m.IngestTimeUs).UTC().Format(time.RFC3339Nano),
		})
		if err != nil {
			return err
		}
	}
	return printHolesBefore(^uint64(0))
}

func runStatus(args []string) error {
	fs := newFlagSet("status", "status [flags]\n\nPrints the sequencer epoch, the committed watermark C and store sizes.")
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
		fmt.Printf("epoch        %d\ncommitted    %d\nreserved     %d\nhole offsets %d\nproducers    %d\nstore bytes  %d\n",
			status.Epoch, status.Committed, status.Reserved, status.HoleOffsets, status.Producers, status.StoreBytes)
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
