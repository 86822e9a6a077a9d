package ledger

import "time"

// askAll calls ask(i), each in its own goroutine, for every member i that
// skip does not exclude, and hands each result to take on the caller's
// goroutine as it arrives. It returns once take says the answers so far
// are enough, or every call has returned: a recovery decides from a quorum
// and does not wait out a paused member's timeout at every step. Calls
// still running go on (each bounded by its own timeout) and their results
// are dropped.
func askAll[T any](n int, skip func(i int) bool, ask func(i int) T, take func(i int, v T) (enough bool)) {
	askAllGrace(n, skip, ask, take, 0)
}

// askAllGrace is askAll that, once take says enough, still takes the
// answers that arrive within grace (take's verdict on them is ignored).
func askAllGrace[T any](n int, skip func(i int) bool, ask func(i int) T, take func(i int, v T) (enough bool), grace time.Duration) {
	type result struct {
		i int
		v T
	}
	results := make(chan result, n) // buffered: a dropped result does not block its goroutine
	pending := 0
	for i := range n {
		if skip != nil && skip(i) {
			continue
		}
		pending++
		go func() { results <- result{i, ask(i)} }()
	}
	var deadline <-chan time.Time
	for ; pending > 0; pending-- {
		select {
		case r := <-results:
			if take(r.i, r.v) && deadline == nil {
				if grace <= 0 {
					return
				}
				deadline = time.After(grace)
			}
		case <-deadline:
			return
		}
	}
}
