package sequencer

// Argument parsing for transcript commands. This file depends only on the
// standard library and the datadriven package, so another protocol machine's
// transcript test can copy it as it is.
//
// A command line is `cmd word ... key=value ...`. Words are arguments without
// a value (`session open`, `tick +1s`, `recovering`); named arguments carry
// one value each. Values are plain strings, offset ranges `[first,end)`,
// entry spans `0:[0,10),1:[10,20)` or Go durations (`200ms`, `+1s`).

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/datadriven"
)

// scriptArgs holds one command's arguments. Errors are sticky: the first
// problem is kept in err and later getters return zero values, so a handler
// reads all its arguments and then checks done once.
type scriptArgs struct {
	cmd   string
	words []string
	named map[string]string
	used  map[string]bool
	err   error
}

func newScriptArgs(cmd string, list []datadriven.CmdArg) *scriptArgs {
	a := &scriptArgs{cmd: cmd, named: make(map[string]string), used: make(map[string]bool)}
	for _, arg := range list {
		switch {
		case len(arg.Vals) == 0:
			a.words = append(a.words, arg.Key)
		case len(arg.Vals) > 1:
			a.fail("%s: one value expected, got %d", arg.Key, len(arg.Vals))
		default:
			if _, dup := a.named[arg.Key]; dup {
				a.fail("%s given twice", arg.Key)
			}
			a.named[arg.Key] = arg.Vals[0]
		}
	}
	return a
}

// parseScriptLine parses one input line of a block into its command and
// arguments.
func parseScriptLine(line string) (*scriptArgs, error) {
	cmd, list, err := datadriven.ParseLine(line)
	if err != nil {
		return nil, err
	}
	return newScriptArgs(cmd, list), nil
}

func (a *scriptArgs) fail(format string, args ...any) {
	if a.err == nil {
		a.err = fmt.Errorf("%s: %s", a.cmd, fmt.Sprintf(format, args...))
	}
}

// word returns the i-th argument without a value, "" if there is none.
func (a *scriptArgs) word(i int) string {
	if i >= len(a.words) {
		return ""
	}
	a.used["#"+strconv.Itoa(i)] = true
	return a.words[i]
}

// flag reports whether the word name was given (and consumes it).
func (a *scriptArgs) flag(name string) bool {
	i := slices.Index(a.words, name)
	if i < 0 {
		return false
	}
	a.used["#"+strconv.Itoa(i)] = true
	return true
}

// get returns the value of key; a missing required key is an error.
func (a *scriptArgs) get(key string, required bool) (string, bool) {
	v, ok := a.named[key]
	if !ok && required {
		a.fail("missing %s=", key)
	}
	a.used[key] = true
	return v, ok
}

func (a *scriptArgs) str(key, def string) string {
	if v, ok := a.get(key, false); ok {
		return v
	}
	return def
}

func (a *scriptArgs) mustStr(key string) string {
	v, _ := a.get(key, true)
	return v
}

func (a *scriptArgs) uint(key string, def uint64) uint64 {
	v, ok := a.get(key, false)
	if !ok {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		a.fail("%s=%s: not a number", key, v)
	}
	return n
}

func (a *scriptArgs) mustUint(key string) uint64 {
	a.get(key, true)
	return a.uint(key, 0)
}

func (a *scriptArgs) duration(key string, def time.Duration) time.Duration {
	v, ok := a.get(key, false)
	if !ok {
		return def
	}
	return a.parseDuration(key, v)
}

func (a *scriptArgs) parseDuration(key, v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		a.fail("%s=%s: not a duration", key, v)
	}
	return d
}

// offsets returns the half-open range `[first,end)` given as key.
func (a *scriptArgs) offsets(key string) (first, end uint64) {
	v, _ := a.get(key, true)
	first, end, err := parseOffsets(v)
	if err != nil && a.err == nil {
		a.fail("%s=%s: %v", key, v, err)
	}
	return first, end
}

// done reports the first error, or an argument that no getter asked for
// (usually a typo in the script).
func (a *scriptArgs) done() error {
	if a.err != nil {
		return a.err
	}
	for key := range a.named {
		if !a.used[key] {
			return fmt.Errorf("%s: unknown argument %s=", a.cmd, key)
		}
	}
	for i, w := range a.words {
		if !a.used["#"+strconv.Itoa(i)] {
			return fmt.Errorf("%s: unexpected %q", a.cmd, w)
		}
	}
	return nil
}

var offsetsPattern = regexp.MustCompile(`^\[(\d+),(\d+)\)$`)

// parseOffsets parses `[first,end)`.
func parseOffsets(s string) (first, end uint64, err error) {
	m := offsetsPattern.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, fmt.Errorf("want [first,end)")
	}
	first, _ = strconv.ParseUint(m[1], 10, 64)
	end, _ = strconv.ParseUint(m[2], 10, 64)
	if end < first {
		return 0, 0, fmt.Errorf("end below first")
	}
	return first, end, nil
}

// entrySpanText is one `entry:[first,end)` of a span list.
type entrySpanText struct {
	entry      int64
	first, end uint64
}

// parseEntrySpans parses `0:[0,10),1:[10,20)` (entry 0 holds [0,10), entry 1
// holds [10,20)); "" and "none" are the empty list.
func parseEntrySpans(s string) ([]entrySpanText, error) {
	if s == "" || s == "none" {
		return nil, nil
	}
	var out []entrySpanText
	for part := range strings.SplitSeq(strings.ReplaceAll(s, "),", ");"), ";") {
		entry, offsets, ok := strings.Cut(part, ":")
		n, err := strconv.ParseInt(entry, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("%q: want entry:[first,end)", part)
		}
		first, end, err := parseOffsets(offsets)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		out = append(out, entrySpanText{entry: n, first: first, end: end})
	}
	return out, nil
}
