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

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on
// every Linux architecture Go supports (the kernel converts to it).
const clockTicks = 100

// processCPU is the user + system CPU time pid has used so far.
func processCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from after it.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(fields[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, fields[11], fields[12])
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
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
