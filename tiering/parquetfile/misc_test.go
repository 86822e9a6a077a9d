package parquetfile

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func openBytes(data []byte) (*File, error) { return Open(bytes.NewReader(data), int64(len(data))) }
