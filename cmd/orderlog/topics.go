package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"orderlog/client"
	"orderlog/proto/orderlogpb"
)

const topicsUsage = `topics create NAME [--partitions N] [--cleanup-policy delete|compact] [--retention-ms MS]
       orderlog topics list
       orderlog topics partitions [NAME]

create makes a topic with a fixed number of virtual partitions (default 16,
at most 1024): a message's partition is a hash of its key modulo that
number, so it cannot change later. A topic is also created, with 16
partitions, by its first message. list prints every topic; partitions
prints a topic's partitions (default: the topic "default") with the
offset their reads end at, the committed watermark they share.`

func runTopics(args []string) error {
	fs := newFlagSet("topics", topicsUsage)
	var cf clientFlags
	cf.register(fs)
	partitions := fs.Uint("partitions", 0, "with create: the partition count (0: 16)")
	policy := fs.String("cleanup-policy", "", "with create: delete (default) or compact")
	retention := fs.Int64("retention-ms", 0, "with create: keep messages this long even below the log start (-1: forever)")
	// The verb and the name come first; flags may follow them.
	verb, rest := "", args
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		verb, rest = rest[0], rest[1:]
	}
	name := ""
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		name, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return err
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	}
	if verb == "" {
		fs.Usage()
		return errors.New("topics: a verb is required: create, list or partitions")
	}
	if *partitions > 1024 {
		return fmt.Errorf("--partitions %d: at most 1024", *partitions)
	}
	return cf.withClient(func(ctx context.Context, cl *client.Client) error {
		switch verb {
		case "create":
			if name == "" {
				return errors.New("topics create: give the topic's name")
			}
			req := &orderlogpb.CreateTopicRequest{Name: name, Partitions: uint32(*partitions),
				Config: &orderlogpb.TopicConfig{CleanupPolicy: *policy, RetentionMs: *retention}}
			t, err := cl.CreateTopicWith(ctx, req)
			if err != nil {
				return err
			}
			fmt.Printf("created topic %s with %d partitions\n", t.Name, t.Partitions)
			return nil
		case "list":
			return listTopics(ctx, cl)
		case "partitions":
			return listPartitions(ctx, cl, name)
		}
		return fmt.Errorf("topics: unknown verb %q: use create, list or partitions", verb)
	})
}

func listTopics(ctx context.Context, cl *client.Client) error {
	topics, err := cl.ListTopics(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tCLEANUP\tRETENTION_MS")
	for _, t := range topics {
		policy := t.GetConfig().GetCleanupPolicy()
		if policy == "" {
			policy = "delete"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", t.Name, t.Partitions, policy, t.GetConfig().GetRetentionMs())
	}
	return tw.Flush()
}

func listPartitions(ctx context.Context, cl *client.Client, topic string) error {
	resp, err := cl.ListPartitions(ctx, topic)
	if err != nil {
		return err
	}
	fmt.Printf("topic %s: %d partitions, log start %d, committed watermark %d\n", resp.Topic, len(resp.Partitions), resp.LogStart, resp.Committed)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tEND_OFFSET")
	for _, p := range resp.Partitions {
		fmt.Fprintf(tw, "%d\t%d\n", p.Partition, p.EndOffset)
	}
	return tw.Flush()
}
