package ledger

// askAll calls ask(i), each in its own goroutine, for every member i that
// skip does not exclude, and hands each result to take on the caller's
// goroutine as it arrives. It returns once take says the answers so far
// are enough, or every call has returned: a recovery decides from a quorum
// and does not wait out a paused member's timeout at every step. Calls
// still running go on (each bounded by its own timeout) and their results
// are dropped.
func askAll[T any](n int, skip func(i int) bool, ask func(i int) T, take func(i int, v T) (enough bool)) {
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
	for ; pending > 0; pending-- {
		r := <-results
		if take(r.i, r.v) {
			return
		}
	}
}
