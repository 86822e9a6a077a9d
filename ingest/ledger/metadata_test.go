package ledger

import (
	"reflect"
	"strings"
	"testing"
)

func sampleMetadata() Metadata {
	return Metadata{
		ID: 7, WriterIncarnation: "ingest-a", Epoch: 12,
		Ensemble: []Member{{StoreID: "s1", Incarnation: 11, Address: "127.0.0.1:1"}, {StoreID: "s2", Incarnation: 12, Address: "127.0.0.1:2"}, {StoreID: "s3", Incarnation: 13, Address: "127.0.0.1:3"}},
		W:        3, IntendedW: 3, A: 2, State: StateClosed, LastEntry: 41, FirstOffset: 1000, EndOffset: 2000,
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	m := sampleMetadata()
	b, err := encodeMetadata(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"version":1`, `"state":"closed"`, `"last_entry":41`, `"incarnation":12`} {
		if !strings.Contains(string(b), field) {
			t.Errorf("encoding %s lacks %s", b, field)
		}
	}
	got, err := decodeMetadata(b, 99)
	if err != nil {
		t.Fatal(err)
	}
	m.Version, m.ModRevision = MetadataVersion, 99
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip\n got %+v\nwant %+v", got, m)
	}
}

func TestMetadataRejects(t *testing.T) {
	cases := map[string]func(*Metadata){
		"w_mismatch":         func(m *Metadata) { m.W = 2 },
		"a_above_w":          func(m *Metadata) { m.A = 4 },
		"unknown_state":      func(m *Metadata) { m.State = "half-open" },
		"open_with_last":     func(m *Metadata) { m.State = StateOpen },
		"inverted_offsets":   func(m *Metadata) { m.EndOffset = 10 },
		"last_below_minus_1": func(m *Metadata) { m.LastEntry = -2 },
	}
	for name, damage := range cases {
		m := sampleMetadata()
		damage(&m)
		if _, err := encodeMetadata(m); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
	if _, err := decodeMetadata([]byte(`{"version":3,"w":0,"a":0}`), 1); err == nil {
		t.Error("decoded unknown version")
	}
	if _, err := decodeMetadata([]byte(`{"version":1`), 1); err == nil {
		t.Error("decoded torn JSON")
	}
}

func FuzzDecodeMetadata(f *testing.F) {
	b, _ := encodeMetadata(sampleMetadata())
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add([]byte(`{"version":1,"ensemble":[],"w":0,"a":1,"state":"open","last_entry":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeMetadata(data, 1)
		if err != nil {
			return
		}
		again, err := encodeMetadata(m)
		if err != nil {
			t.Fatalf("decoded metadata does not re-encode: %v", err)
		}
		if _, err := decodeMetadata(again, 1); err != nil {
			t.Fatalf("re-encoded metadata does not decode: %v", err)
		}
	})
}
