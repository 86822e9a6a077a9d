package node

import (
	"log/slog"
	"testing"
)

// testLogger logs to the test's output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// lineWriter hands each write (one log line) to a function.
type lineWriter func(line string)

func (w lineWriter) Write(p []byte) (int, error) {
	w(string(p))
	return len(p), nil
}
