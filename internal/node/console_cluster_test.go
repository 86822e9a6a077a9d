package node

import (
	"encoding/json"
	"testing"
	"time"
)

// TestConsoleClusterNamesTheLeaderAndEachStoresHealth: the Overview's
// cluster route names the sequencer's leader and every registered store
// with the answer of its health check.
func TestConsoleClusterNamesTheLeaderAndEachStoresHealth(t *testing.T) {
	s := startServer(t, t.TempDir())
	defer s.Close()
	var got struct {
		Leader string         `json:"sequencer_leader"`
		Stores []consoleStore `json:"stores"`
	}
	// The health service turns SERVING once every role is (ready.go).
	waitFor(t, 10*time.Second, "the store to answer SERVING", func() bool {
		code, _, body := httpDo(t, "GET", "http://"+s.HTTPAddr()+"/v1/console/cluster", "", nil)
		if code != 200 {
			t.Fatalf("GET /v1/console/cluster: %d %s", code, body)
		}
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatal(err)
		}
		return len(got.Stores) == 1 && got.Stores[0].Health == "SERVING"
	})
	if got.Leader != s.AdvertisedGRPCAddr() {
		t.Errorf("leader %q, want this node %q", got.Leader, s.AdvertisedGRPCAddr())
	}
	if len(got.Stores) != 1 || !got.Stores[0].Self || got.Stores[0].Health != "SERVING" || got.Stores[0].Address != s.AdvertisedGRPCAddr() {
		t.Errorf("stores %+v, want this node's, SERVING", got.Stores)
	}
}
