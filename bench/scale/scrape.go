package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var httpClient = &http.Client{Timeout: 5 * time.Second}

// scrape reads a process's GET /metrics and returns, for each metric
// name, the sum of its samples over all label sets (text format).
func scrape(httpAddr string) (map[string]float64, error) {
	resp, err := httpClient.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: %s", httpAddr, resp.Status)
	}
	sums := map[string]float64{}
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(make([]byte, 1<<16), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, ok := parseSample(line)
		if ok {
			sums[name] += value
		}
	}
	return sums, scanner.Err()
}

// parseSample splits `name{labels} value` or `name value` (Go's client
// writes no timestamps, so the value is the last field).
func parseSample(line string) (string, float64, bool) {
	end := strings.IndexAny(line, "{ ")
	fields := strings.Fields(line)
	if end <= 0 || len(fields) < 2 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
	return line[:end], v, err == nil
}

// gatherLocal sums this process's own Prometheus metrics by name: the
// embedded etcd server registers its counters in the default registry.
func gatherLocal() (map[string]float64, error) {
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return nil, err
	}
	sums := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				sums[f.GetName()] += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sums[f.GetName()] += m.GetGauge().GetValue()
			}
		}
	}
	return sums, nil
}

// machineCPU reads the first line of /proc/stat: the time all cores
// were busy and the total, in ticks.
func machineCPU() (busy, total int64, err error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)[1:]
	for i, f := range fields {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, 0, err
		}
		total += v
		if i != 3 && i != 4 { // idle and iowait
			busy += v
		}
	}
	return busy, total, nil
}
