package schema

import (
	"fmt"
	"strings"

	"orderlog/internal/apierr"
)

// Level is a subject's compatibility level, spelt as in Confluent.
type Level string

const (
	None               Level = "NONE"
	Backward           Level = "BACKWARD"
	BackwardTransitive Level = "BACKWARD_TRANSITIVE"
	Forward            Level = "FORWARD"
	ForwardTransitive  Level = "FORWARD_TRANSITIVE"
	Full               Level = "FULL"
	FullTransitive     Level = "FULL_TRANSITIVE"
)

// DefaultLevel is the global level until one is set, as in Confluent.
const DefaultLevel = Backward

// ParseLevel reads a level, case-insensitively.
func ParseLevel(s string) (Level, error) {
	l := Level(strings.ToUpper(s))
	switch l {
	case None, Backward, BackwardTransitive, Forward, ForwardTransitive, Full, FullTransitive:
		return l, nil
	}
	return "", apierr.New(apierr.InvalidArgument, "unknown compatibility level %q", s)
}

func (l Level) backward() bool {
	return l == Backward || l == BackwardTransitive || l == Full || l == FullTransitive
}

func (l Level) forward() bool {
	return l == Forward || l == ForwardTransitive || l == Full || l == FullTransitive
}

func (l Level) transitive() bool {
	return l == BackwardTransitive || l == ForwardTransitive || l == FullTransitive
}

// Check decides whether candidate may become the next version of a
// subject whose versions are previous (previous[i] is version i+1) under
// level. BACKWARD: the candidate reads data written with the latest
// version; FORWARD: the latest version reads data written with the
// candidate; FULL: both. The _TRANSITIVE forms check every version, not
// only the latest. The error is an *IncompatibleError naming the first
// incompatibility found (newest version first).
func Check(level Level, candidate *Parsed, previous []*Parsed) error {
	if level == None || len(previous) == 0 {
		return nil
	}
	first := len(previous) - 1
	if level.transitive() {
		first = 0
	}
	for i := len(previous) - 1; i >= first; i-- {
		if err := checkPair(level, candidate, previous[i], i+1); err != nil {
			return err
		}
	}
	return nil
}

// checkPair checks candidate against one existing version.
func checkPair(level Level, candidate, existing *Parsed, version int) error {
	if level.backward() {
		if reason := readable(candidate, existing); reason != "" {
			return &IncompatibleError{Version: version, Backward: true, Reason: reason}
		}
	}
	if level.forward() {
		if reason := readable(existing, candidate); reason != "" {
			return &IncompatibleError{Version: version, Backward: false, Reason: reason}
		}
	}
	return nil
}

// readable says why data written with writer cannot be read with reader,
// or "" if it can.
func readable(reader, writer *Parsed) string {
	if reader.Format != writer.Format {
		return fmt.Sprintf("schema type changed from %s to %s", writer.Format, reader.Format)
	}
	switch reader.Format {
	case Avro:
		return avroReadable(reader, writer)
	case JSONSchema:
		return jsonReadable(reader.json, writer.json, "#")
	case Protobuf:
		return protoReadable(reader.proto, writer.proto)
	}
	return fmt.Sprintf("compatibility of %s schemas is not checked", reader.Format)
}
