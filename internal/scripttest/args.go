// Package scripttest parses the commands of protocol transcripts
// (datadriven scripts under testdata/, see docs/testing.md): the
// sequencer's and the ingest coordinator's machine tests share it. Only
// tests import it.
//
// A command line is `cmd word ... key=value ...`. Words are arguments without
// a value (`session open`, `tick +1s`, `recovering`); named arguments carry
// one value each. Values are plain strings, offset ranges `[first,end)`,
// entry spans `0:[0,10),1:[10,20)` or Go durations (`200ms`, `+1s`).
package scripttest

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/datadriven"
)

// Args holds one command's arguments. Errors are sticky: the first
// problem is kept in err and later getters return zero values, so a handler
// reads all its arguments and then checks done once.
type Args struct {
	Cmd   string
	words []string
	named map[string]string
	used  map[string]bool
	err   error
}

func NewArgs(cmd string, list []datadriven.CmdArg) *Args {
	a := &Args{Cmd: cmd, named: make(map[string]string), used: make(map[string]bool)}
	for _, arg := range list {
		switch {
		case len(arg.Vals) == 0:
			a.words = append(a.words, arg.Key)
		case len(arg.Vals) > 1:
			a.Fail("%s: one value expected, got %d", arg.Key, len(arg.Vals))
		default:
			if _, dup := a.named[arg.Key]; dup {
				a.Fail("%s given twice", arg.Key)
			}
			a.named[arg.Key] = arg.Vals[0]
		}
	}
	return a
}

// ParseLine parses one input line of a block into its command and
// arguments.
func ParseLine(line string) (*Args, error) {
	cmd, list, err := datadriven.ParseLine(line)
	if err != nil {
		return nil, err
	}
	return NewArgs(cmd, list), nil
}

func (a *Args) Fail(format string, args ...any) {
	if a.err == nil {
		a.err = fmt.Errorf("%s: %s", a.Cmd, fmt.Sprintf(format, args...))
	}
}

// Word returns the i-th argument without a value, "" if there is none.
func (a *Args) Word(i int) string {
	if i >= len(a.words) {
		return ""
	}
	a.used["#"+strconv.Itoa(i)] = true
	return a.words[i]
}

// Flag reports whether the word name was given (and consumes it).
func (a *Args) Flag(name string) bool {
	i := slices.Index(a.words, name)
	if i < 0 {
		return false
	}
	a.used["#"+strconv.Itoa(i)] = true
	return true
}

// get returns the value of key; a missing required key is an error.
func (a *Args) get(key string, required bool) (string, bool) {
	v, ok := a.named[key]
	if !ok && required {
		a.Fail("missing %s=", key)
	}
	a.used[key] = true
	return v, ok
}

func (a *Args) Str(key, def string) string {
	if v, ok := a.get(key, false); ok {
		return v
	}
	return def
}

func (a *Args) MustStr(key string) string {
	v, _ := a.get(key, true)
	return v
}

func (a *Args) Uint(key string, def uint64) uint64 {
	v, ok := a.get(key, false)
	if !ok {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		a.Fail("%s=%s: not a number", key, v)
	}
	return n
}

func (a *Args) MustUint(key string) uint64 {
	a.get(key, true)
	return a.Uint(key, 0)
}

func (a *Args) Duration(key string, def time.Duration) time.Duration {
	v, ok := a.get(key, false)
	if !ok {
		return def
	}
	return a.ParseDuration(key, v)
}

func (a *Args) ParseDuration(key, v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		a.Fail("%s=%s: not a duration", key, v)
	}
	return d
}

// Offsets returns the half-open range `[first,end)` given as key.
func (a *Args) Offsets(key string) (first, end uint64) {
	v, _ := a.get(key, true)
	first, end, err := ParseOffsets(v)
	if err != nil && a.err == nil {
		a.Fail("%s=%s: %v", key, v, err)
	}
	return first, end
}

// Done reports the first error, or an argument that no getter asked for
// (usually a typo in the script).
func (a *Args) Done() error {
	if a.err != nil {
		return a.err
	}
	for key := range a.named {
		if !a.used[key] {
			return fmt.Errorf("%s: unknown argument %s=", a.Cmd, key)
		}
	}
	for i, w := range a.words {
		if !a.used["#"+strconv.Itoa(i)] {
			return fmt.Errorf("%s: unexpected %q", a.Cmd, w)
		}
	}
	return nil
}

var offsetsPattern = regexp.MustCompile(`^\[(\d+),(\d+)\)$`)

// ParseOffsets parses `[first,end)`.
func ParseOffsets(s string) (first, end uint64, err error) {
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

// EntrySpan is one `entry:[first,end)` of a span list.
type EntrySpan struct {
	Entry      int64
	First, End uint64
}

// ParseEntrySpans parses `0:[0,10),1:[10,20)` (entry 0 holds [0,10), entry 1
// holds [10,20)); "" and "none" are the empty list.
func ParseEntrySpans(s string) ([]EntrySpan, error) {
	if s == "" || s == "none" {
		return nil, nil
	}
	var out []EntrySpan
	for part := range strings.SplitSeq(strings.ReplaceAll(s, "),", ");"), ";") {
		entry, offsets, ok := strings.Cut(part, ":")
		n, err := strconv.ParseInt(entry, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("%q: want entry:[first,end)", part)
		}
		first, end, err := ParseOffsets(offsets)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		out = append(out, EntrySpan{Entry: n, First: first, End: end})
	}
	return out, nil
}

// Err is the first problem found so far (Done also checks for arguments
// nobody asked for).
func (a *Args) Err() error { return a.err }

// Int returns key as a signed number (ledger entries: -1 is none), def if
// it is absent.
func (a *Args) Int(key string, def int64) int64 {
	v, ok := a.get(key, false)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		a.Fail("%s=%s: not a number", key, v)
	}
	return n
}

// Has reports whether key was given, without consuming it.
func (a *Args) Has(key string) bool {
	_, ok := a.named[key]
	return ok
}

// RunBlock runs a block's command line and then every input line below it
// (blank lines and # comments skipped) through run, and returns what they
// printed, "ok" if nothing.
func RunBlock(td *datadriven.TestData, run func(*Args, *strings.Builder) error) (string, error) {
	var out strings.Builder
	if err := run(NewArgs(td.Cmd, td.CmdArgs), &out); err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(td.Input, "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		a, err := ParseLine(line)
		if err != nil {
			return "", err
		}
		if err := run(a, &out); err != nil {
			return "", err
		}
	}
	if out.Len() == 0 {
		return "ok\n", nil
	}
	return out.String(), nil
}
