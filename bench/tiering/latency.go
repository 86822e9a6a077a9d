package main

import (
	"context"
	"fmt"
	"time"

	"orderlog/bench/internal/benchutil"
	"orderlog/client"
)

// latencyResult is the half-rate produce latency of a dev with tiering
// running and of one without, at the same rate.
type latencyResult struct {
	peak, rate           float64 // msg/s: the plain dev's peak, and half of it asked
	plainP99, tieringP99 float64 // ms, medians of rounds
	ratio                float64 // median of the rounds' ratios
	files                float64 // files the tiering dev published meanwhile
}

// measureLatency runs bench/e2e's latency measurement (client.RunLoad:
// 16 idempotent streams of 1 KiB messages, frames of 64, 8 in flight, at
// half the peak rate) against two devs started side by side, one with
// tiering (files cut after 1 s, so the worker archives while the load
// runs) and one with --archive none, alternating which goes first each
// round; the peak is the plain dev's.
func measureLatency(ctx context.Context, plain, tiered *dev, duration time.Duration, rounds int) (latencyResult, error) {
	load := client.LoadConfig{Streams: 16, Size: 1024, Frame: 64, InFlight: 8, Duration: duration}
	for _, d := range []*dev{plain, tiered} { // warm-up: ledgers open, reservations made
		warm := load
		warm.Duration = time.Second
		if _, err := client.RunLoad(ctx, d.client, warm); err != nil {
			return latencyResult{}, err
		}
	}
	var res latencyResult
	peak, err := client.RunLoad(ctx, plain.client, load)
	if err != nil {
		return res, err
	}
	res.peak = peak.MessagesPerSecond()
	load.Rate = peak.MessagesPerSecond() / 2
	res.rate = load.Rate
	fmt.Printf("latency: peak without tiering %.0f msg/s; half rate %.0f msg/s\n", res.peak, load.Rate)
	filesBefore, _ := tiered.metric("orderlog_tiering_files_total")
	var plainP99, tieringP99, ratios []float64
	for r := range rounds {
		order := []*dev{plain, tiered}
		if r%2 == 1 {
			order = []*dev{tiered, plain}
		}
		p99 := map[*dev]float64{}
		for _, d := range order {
			half, err := client.RunLoad(ctx, d.client, load)
			if err != nil {
				return res, err
			}
			p99[d] = ms(half.Percentile(0.99))
		}
		fmt.Printf("latency round %d: p99 %.2f ms without tiering, %.2f ms with tiering (at %.0f msg/s)\n", r, p99[plain], p99[tiered], load.Rate)
		plainP99 = append(plainP99, p99[plain])
		tieringP99 = append(tieringP99, p99[tiered])
		ratios = append(ratios, p99[tiered]/p99[plain])
	}
	filesAfter, _ := tiered.metric("orderlog_tiering_files_total")
	res.files = filesAfter - filesBefore
	res.plainP99, res.tieringP99, res.ratio = benchutil.Median(plainP99), benchutil.Median(tieringP99), benchutil.Median(ratios)
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
