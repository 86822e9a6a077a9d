package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"testing"
)

// TestEveryFieldHasADefault: EnsureDefaults and Tee cover every field, so a
// component can call any callback of a zero Listener.
func TestEveryFieldHasADefault(t *testing.T) {
	var l Listener
	l.EnsureDefaults()
	tee := Tee(Listener{}, Listener{})
	logging := Logging(nil)
	for _, got := range []Listener{l, tee, logging} {
		v := reflect.ValueOf(got)
		for i := range v.NumField() {
			if v.Field(i).IsNil() {
				t.Errorf("field %s is nil", v.Type().Field(i).Name)
			}
		}
	}
}

func TestTeeCallsBothInOrder(t *testing.T) {
	var calls []string
	a := Listener{LedgerRecovered: func(i RecoveryInfo) { calls = append(calls, "a", string(i.Outcome)) }}
	b := Listener{LedgerRecovered: func(i RecoveryInfo) { calls = append(calls, "b", string(i.Outcome)) }}
	tee := Tee(a, b)
	tee.LedgerRecovered(RecoveryInfo{Outcome: RecoveryClosed})
	tee.LeaderElected(LeaderInfo{}) // nil in both: a no-op
	if want := []string{"a", "closed", "b", "closed"}; !reflect.DeepEqual(calls, want) {
		t.Fatalf("calls %v, want %v", calls, want)
	}
}

// TestLoggingCarriesTheIDs: each event is one line at its level with the
// ids an operator follows it by.
func TestLoggingCarriesTheIDs(t *testing.T) {
	var buf bytes.Buffer
	l := Logging(slog.New(slog.NewJSONHandler(&buf, nil)))
	l.LedgerRecovered(RecoveryInfo{Ledger: 7, Epoch: 3, Writer: "n1-1", Outcome: RecoveryClosed, Last: 41})
	l.WriterFailed(WriterFailure{Ledger: 8, Epoch: 3, Writer: "n1-1", Err: errors.New("quorum lost")})
	l.LeaderElected(LeaderInfo{Address: "127.0.0.1:7070", Epoch: 9})
	var lines []map[string]any
	for _, raw := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), buf.String())
	}
	checks := []map[string]any{
		{"level": "INFO", "msg": "ledger recovered", "ledger": 7.0, "epoch": 3.0, "outcome": "closed", "last_entry": 41.0},
		{"level": "ERROR", "msg": "ledger writer failed", "ledger": 8.0, "writer": "n1-1", "err": "quorum lost"},
		{"level": "INFO", "msg": "sequencer leader elected", "epoch": 9.0, "addr": "127.0.0.1:7070"},
	}
	for i, want := range checks {
		for k, v := range want {
			if lines[i][k] != v {
				t.Errorf("line %d: %s = %v, want %v (%v)", i, k, lines[i][k], v, lines[i])
			}
		}
	}
}
