package httpapi

import "errors"

// Limits bounds what one HTTP request may carry.
type Limits struct {
	MaxMessageBytes int // one message's value
	MaxBodyBytes    int // one request body
	MaxBatch        int // messages in one POST
	MaxReadLimit    int // the limit of one GET
}

// DefaultLimits are the limits used when none are configured.
var DefaultLimits = Limits{
	MaxMessageBytes: 1 << 20,
	MaxBodyBytes:    16 << 20,
	MaxBatch:        10_000,
	MaxReadLimit:    10_000,
}

// Validate fills zero fields with defaults and rejects negative ones.
func (l *Limits) Validate() error {
	fields := []struct {
		value *int
		def   int
	}{
		{&l.MaxMessageBytes, DefaultLimits.MaxMessageBytes},
		{&l.MaxBodyBytes, DefaultLimits.MaxBodyBytes},
		{&l.MaxBatch, DefaultLimits.MaxBatch},
		{&l.MaxReadLimit, DefaultLimits.MaxReadLimit},
	}
	for _, f := range fields {
		if *f.value < 0 {
			return errors.New("httpapi: limits must not be negative")
		}
		if *f.value == 0 {
			*f.value = f.def
		}
	}
	return nil
}
