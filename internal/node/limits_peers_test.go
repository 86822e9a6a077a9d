package node

import (
	"context"
	"slices"
	"testing"

	"orderlog/ingest/ledger"
	"orderlog/internal/keys"
)

// TestRegisteredAddressesResolve: a store's registration is decoded, an
// ingest node's or sequencer candidate's is the address; an unspecified
// host stands for loopback.
func TestRegisteredAddressesResolve(t *testing.T) {
	cases := map[string][]string{
		"10.0.0.7:7000": {"10.0.0.7"},
		"[::1]:7000":    {"::1"},
		":7000":         {"127.0.0.1", "::1"},
		"0.0.0.0:7000":  {"127.0.0.1", "::1"},
		"":              nil,
	}
	for address, want := range cases {
		if got := resolvePeer(context.Background(), registeredAddress(keys.Ingest("i"), []byte(address))); !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", address, got, want)
		}
	}
	value, err := ledger.EncodeStoreRegistration(ledger.Member{StoreID: "s", Address: "10.0.0.8:7001"})
	if err != nil {
		t.Fatal(err)
	}
	if got := registeredAddress(keys.Store("s"), value); got != "10.0.0.8:7001" {
		t.Errorf("a store's registration: %q", got)
	}
}
