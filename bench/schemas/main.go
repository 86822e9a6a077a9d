// Command schemas benchmarks validation on produce (`make bench-schemas`,
// issue 21): it starts `orderlog dev` as a separate process and drives it
// with the `make bench-e2e` load (16 idempotent gRPC streams, frames of
// 64, fsync before ack) of 1 KiB JSON payloads, alternately into a topic
// with strict JSON Schema validation and into one without, in the same
// run and on the same server, so that the ratio is the validation's cost
// alone. Each round runs both, in alternating order; medians are printed.
// It ends with validated_vs_plain_ratio=<x> (goal >= 0.8) and
// validated_cpu_per_msg_ratio=<x> (server and load generator CPU).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"orderlog/bench/internal/benchutil"
	"orderlog/client"
	"orderlog/internal/proccpu"
	"orderlog/proto/orderlogpb"
)

// orderSchema describes orderPayload, every field typed and none other allowed.
const orderSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "order",
  "type": "object",
  "properties": {
    "order_id": {"type": "integer"},
    "customer": {"type": "object", "properties": {"id": {"type": "string"}, "name": {"type": "string"}, "email": {"type": "string"}}, "required": ["id"]},
    "currency": {"type": "string"},
    "total": {"type": "number"},
    "paid": {"type": "boolean"},
    "items": {"type": "array", "items": {"type": "object",
      "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}, "price": {"type": "number"}}, "required": ["sku", "qty"]}},
    "note": {"type": ["string", "null"]}
  },
  "required": ["order_id", "customer", "items"],
  "additionalProperties": false
}`

// orderPayload is a 1 KiB order: the note pads it to exactly size bytes.
func orderPayload(size int) []byte {
	var items []string
	for i := range 8 {
		items = append(items, fmt.Sprintf(`{"sku":"SKU-%05d","qty":%d,"price":%d.%02d}`, 1000+i, i+1, 10+i, 5*i))
	}
	head := fmt.Sprintf(`{"order_id":123456789,"customer":{"id":"c-4711","name":"Ada Lovelace","email":"ada@example.org"},`+
		`"currency":"EUR","total":1234.5,"paid":true,"items":[%s],"note":"`, strings.Join(items, ","))
	pad := max(0, size-len(head)-2)
	return []byte(head + strings.Repeat("x", pad) + `"}`)
}

func main() {
	binary := flag.String("orderlog", "bin/orderlog", "the orderlog binary to start as `orderlog dev`")
	duration := flag.Duration("duration", 6*time.Second, "length of each measurement")
	rounds := flag.Int("rounds", 3, "rounds of plain and validated measurements; medians are printed")
	streams := flag.Int("streams", 16, "producer streams")
	size := flag.Int("size", 1024, "JSON payload size")
	serverArgs := flag.String("server-args", "", `more flags for orderlog dev, space-separated ("--pprof --http-addr 127.0.0.1:27380" to profile it)`)
	flag.Parse()

	dir, err := os.MkdirTemp("", "orderlog-schemas-bench")
	check(err)
	defer os.RemoveAll(dir)
	dev, err := benchutil.StartDev(*binary, filepath.Join(dir, "dev"), os.Stderr, strings.Fields(*serverArgs)...)
	check(err)
	defer dev.Stop()
	c, server, ctx := dev.Client, dev.Cmd, context.Background()

	payload := orderPayload(*size)
	version, err := c.Schemas().Register(ctx, "validated", "JSON", orderSchema)
	check(err)
	_, err = c.Schemas().SetConfig(ctx, &orderlogpb.SchemaConfig{Subject: "validated", Validation: "strict"})
	check(err)
	fmt.Printf("payload_bytes=%d schema_id=%d validation=strict\n", len(payload), version.Id)

	load := func(topic string, d time.Duration) (float64, time.Duration) {
		cfg := client.LoadConfig{Streams: *streams, Frame: 64, InFlight: 8, Duration: d, Topic: topic, Payload: payload}
		if topic == "validated" {
			cfg.SchemaID = version.Id
		}
		cpuBefore := cpu(server.Process.Pid)
		r, err := client.RunLoad(ctx, c, cfg)
		check(err)
		return r.MessagesPerSecond(), (cpu(server.Process.Pid) - cpuBefore) / time.Duration(max(1, r.Messages))
	}
	// Warm-up: ledgers open, the schema compiled, and a check that strict
	// validation is on (a payload that does not match is refused).
	load("plain", time.Second)
	load("validated", time.Second)
	checkRefused(ctx, c, version.Id)

	var plainRates, validRates, plainCPU, validCPU []float64
	for r := range *rounds {
		order := []string{"plain", "validated"}
		if r%2 == 1 {
			order = []string{"validated", "plain"}
		}
		for _, topic := range order {
			rate, perMsg := load(topic, *duration)
			fmt.Printf("round=%d topic=%s msgs_per_s=%.0f cpu_us_per_msg=%.2f\n", r+1, topic, rate, float64(perMsg.Nanoseconds())/1e3)
			if topic == "plain" {
				plainRates, plainCPU = append(plainRates, rate), append(plainCPU, float64(perMsg))
			} else {
				validRates, validCPU = append(validRates, rate), append(validCPU, float64(perMsg))
			}
		}
	}
	plain, valid := benchutil.Median(plainRates), benchutil.Median(validRates)
	fmt.Printf("plain_msgs_per_s=%.0f (median of %d)\n", plain, len(plainRates))
	fmt.Printf("validated_msgs_per_s=%.0f (median of %d)\n", valid, len(validRates))
	fmt.Printf("validated_cpu_per_msg_ratio=%.2f\n", benchutil.Median(validCPU)/benchutil.Median(plainCPU))
	fmt.Printf("validated_vs_plain_ratio=%.2f\n", valid/plain)
}

// cpu is the server's and this process's CPU time so far.
func cpu(pid int) time.Duration {
	server, err := proccpu.Process(pid)
	check(err)
	return server + proccpu.Self()
}

// checkRefused makes sure the validated run validates: a frame whose
// payload does not match must be refused.
func checkRefused(ctx context.Context, c *client.Client, id uint32) {
	p, err := c.NewProducer(ctx, "schemas-bench-check", client.ProducerOptions{})
	check(err)
	defer p.Close()
	pending, err := p.Send(ctx, &orderlogpb.Message{Topic: "validated", Value: []byte(`{"order_id":"x"}`), SchemaId: id})
	check(err)
	if _, err := pending.Wait(ctx); err == nil || !strings.Contains(err.Error(), "SCHEMA_MISMATCH") {
		check(fmt.Errorf("a payload that does not match the schema was not refused: %v", err))
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "schemas bench:", err)
		os.Exit(1)
	}
}
