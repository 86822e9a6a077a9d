package ledger

import "testing"

// testBackend is the store implementation the protocol tests run against.
func testBackend(t testing.TB) openBackend {
	m := &memBackends{}
	return m.open
}
