package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
)

const consumeUsage = `consume --group G [--topic T ...] [flags]
       orderlog consume --group G --describe
       orderlog consume --group G --topic T --copy-to OUT

Joins consumer group G and prints the messages of the partitions the group
assigns to this member, one JSON object per line (as read prints them, with
"partition" and "generation"), in global order per partition. Printed
messages are committed every --commit-interval and on exit; a member that
takes a partition over resumes after the last commit. Holes and compacted
ranges are printed as {"skipped":...} lines. Rebalances are reported on
stderr. Run several with the same --group to share the partitions.

--describe prints the group's members and, per partition, the committed
offset, the end offset (the committed watermark C) and the lag.

--copy-to copies the topics' messages to topic OUT exactly once: each
input partition's copies go in frames that carry the group's commit, so
however often the command is killed and started again, every message is
copied once, in order per partition.`

func runConsume(args []string) error {
	fs := newFlagSet("consume", consumeUsage)
	var cf clientFlags
	cf.register(fs)
	group := fs.String("group", "", "the consumer group (required)")
	var topics stringList
	fs.Var(&topics, "topic", "a topic to consume; repeat for several (default: the default topic)")
	name := fs.String("name", "", "this member's name in --describe (default: the host name)")
	start := fs.String("start", "earliest", "where a partition without a committed offset starts: earliest or latest")
	commitEvery := fs.Duration("commit-interval", time.Second, "how often printed messages are committed")
	session := fs.Duration("session-timeout", 0, "how long the member stays after its node stops hearing from it (0: the server's 10s)")
	maxMessages := fs.Uint64("max", 0, "exit after printing this many messages (0: run until interrupted)")
	describe := fs.Bool("describe", false, "print the group's members, offsets and lag, and exit")
	asJSON := fs.Bool("json", false, "with --describe: print the description as JSON")
	copyTo := fs.String("copy-to", "", "copy the messages to this topic exactly once instead of printing them")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *group == "" {
		return errors.New("--group is required")
	}
	if *commitEvery <= 0 {
		return fmt.Errorf("--commit-interval %v must be positive", *commitEvery)
	}
	if *name == "" {
		*name, _ = os.Hostname()
	}
	opts := client.GroupOptions{Group: *group, Topics: topics, ClientName: *name, Start: *start,
		SessionTimeout: *session, AutoCommit: *commitEvery}
	return cf.withClient(func(ctx context.Context, cl *client.Client) error {
		switch {
		case *describe:
			return describeGroup(ctx, cl, *group, *asJSON, os.Stdout)
		case *copyTo != "":
			return copyExactlyOnce(ctx, cl, opts, *copyTo)
		}
		return consumeAndPrint(ctx, cl, opts, *maxMessages)
	})
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// consumedMessage is a message as consume prints it.
type consumedMessage struct {
	printedMessage
	Partition  uint32 `json:"partition"`
	Generation uint64 `json:"generation"`
}

// consumeAndPrint prints the member's messages until ctx ends (or max are
// printed), marking each one processed once it is written.
func consumeAndPrint(ctx context.Context, cl *client.Client, opts client.GroupOptions, maxMessages uint64) error {
	member, err := cl.JoinGroup(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := member.Close(closeCtx); err != nil {
			fmt.Fprintf(os.Stderr, "orderlog consume: last commit: %v\n", err)
		}
	}()
	out := json.NewEncoder(os.Stdout)
	var printed uint64
	generation := uint64(0)
	for maxMessages == 0 || printed < maxMessages {
		batch, err := member.Poll(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if a := member.Assignment(); a.Generation != generation {
			generation = a.Generation
			reportAssignment(os.Stderr, a)
		}
		if err := printSkipped(out, batch.Skipped); err != nil {
			return err
		}
		for _, m := range batch.Messages {
			if err := out.Encode(consumedMessage{toPrinted(m.StoredMessage), m.Partition, m.Generation}); err != nil {
				return err
			}
			member.MarkProcessed(m)
			if printed++; maxMessages != 0 && printed >= maxMessages {
				break
			}
		}
	}
	return nil
}

func printSkipped(out *json.Encoder, skipped []*orderlogpb.SkippedRange) error {
	for _, s := range skipped {
		line := map[string]any{"first": s.First, "end": s.End}
		if s.Reason != "" {
			line["reason"] = s.Reason
		}
		if err := out.Encode(map[string]any{"skipped": line}); err != nil {
			return err
		}
	}
	return nil
}

// reportAssignment tells stderr which partitions this member now holds.
func reportAssignment(w io.Writer, a client.GroupAssignment) {
	parts := make([]string, 0, len(a.Partitions))
	for tp, offset := range a.Partitions {
		parts = append(parts, fmt.Sprintf("%s/%d@%d", tp.Topic, tp.Partition, offset))
	}
	slices.Sort(parts)
	if len(parts) == 0 {
		parts = []string{"none (more members than partitions)"}
	}
	fmt.Fprintf(w, "orderlog consume: member %s, generation %d: %s\n", a.MemberID, a.Generation, strings.Join(parts, " "))
}

// copyExactlyOnce runs client.Transform with a copy to topic out, and
// reports progress on stderr.
func copyExactlyOnce(ctx context.Context, cl *client.Client, opts client.GroupOptions, out string) error {
	var count atomic.Uint64
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(os.Stderr, "orderlog consume: %d messages copied to %s\n", count.Load(), out)
			}
		}
	}()
	return cl.Transform(ctx, client.TransformOptions{GroupOptions: opts}, func(m client.GroupMessage) []*orderlogpb.Message {
		count.Add(1)
		in := m.Message
		// Transform drops a group-commit header the input may carry
		return []*orderlogpb.Message{{Topic: out, Key: in.Key, Value: in.Value, Headers: in.Headers,
			ClientTimeUs: in.ClientTimeUs, MessageId: in.MessageId}}
	})
}

// describeGroup prints a group's description as a table or JSON.
func describeGroup(ctx context.Context, cl *client.Client, group string, asJSON bool, w io.Writer) error {
	d, err := cl.DescribeGroup(ctx, group)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	fmt.Fprintf(w, "group %s, generation %d, %d members, committed watermark %d\n", d.Group, d.Generation, len(d.Members), d.Committed)
	for _, m := range d.Members {
		fmt.Fprintf(w, "member %s (%s) on %s: %d partitions of %s\n", m.MemberId, m.ClientName, m.Node, len(m.Partitions), strings.Join(m.Topics, ","))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tMEMBER")
	for _, p := range d.Partitions {
		committed := "-"
		if p.Committed != nil {
			committed = fmt.Sprint(*p.Committed)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%s\n", p.Topic, p.Partition, committed, p.EndOffset, p.Lag, p.MemberId)
	}
	return tw.Flush()
}
