package ledger

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"orderlog/proto/walpb"
)

// TestReaderFallsBackOnDamagedCopy flips one byte of an entry's payload in
// one store's journal. That store must not serve the entry (its checksum
// fails: UNKNOWN), and the reader serves it from another member.
func TestReaderFallsBackOnDamagedCopy(t *testing.T) {
	c := newTestCluster(t, 3, 21)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := c.create(t, 2, 1, WriterOptions{})
	appendRange(t, w, 0, 30)
	// A=2 of W=3: wait until slot 0, whose copy is damaged below, holds
	// every entry too (on a loaded machine it can be the one left behind).
	waitHolds(ctx, t, c, 0, w.Metadata(), 29)
	m, err := closeConfirmed(ctx, w, 29)
	if err != nil {
		t.Fatal(err)
	}
	const victim = 27 // 27 % 3 == 0: the reader asks slot 0 first
	slot := c.slots[0]
	slot.crash()
	damaged := damagePayload(t, slot.dir, payloadFor(m.ID, victim))
	if !damaged {
		t.Fatal("entry payload not found in slot 0's journal")
	}
	slot.start(t)

	cl, _ := slot.client()
	resp, err := cl.ReadEntry(ctx, &walpb.ReadEntryRequest{LedgerId: m.ID, StoreIncarnation: m.Ensemble[0].Incarnation, EntryId: victim})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status == walpb.EntryStatus_PRESENT || resp.Status == walpb.EntryStatus_ABSENT {
		t.Fatalf("damaged copy answered %s", resp.Status)
	}
	r, err := OpenReader(ctx, c.cli, m.ID, ReaderOptions{Stores: c.net.dialer("reader")})
	if err != nil {
		t.Fatal(err)
	}
	e, err := r.Read(ctx, victim)
	if err != nil || !bytes.Equal(e.Payload, payloadFor(m.ID, victim)) {
		t.Fatalf("Read(%d) = %q, %v", victim, e.Payload, err)
	}
	checkClosedLedger(t, ctx, c, m)
}

// waitHolds waits until the store of slot i holds entry last of ledger m.
func waitHolds(ctx context.Context, t *testing.T, c *testCluster, i int, m Metadata, last int64) {
	t.Helper()
	for {
		if cl, ok := c.slots[i].client(); ok {
			resp, err := cl.LastEntry(ctx, &walpb.LastEntryRequest{LedgerId: m.ID, StoreIncarnation: m.Ensemble[i].Incarnation})
			if err == nil && resp.LastEntry >= last {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("slot %d never held entry %d of ledger %d", i, last, m.ID)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func closeConfirmed(ctx context.Context, w *Writer, last int64) (Metadata, error) {
	if err := w.WaitConfirmed(ctx, last); err != nil {
		return Metadata{}, err
	}
	return w.Close(ctx)
}

// damagePayload flips a byte inside the first occurrence of payload in the
// files of dir and reports whether it found one.
func damagePayload(t *testing.T, dir string, payload []byte) bool {
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		path := filepath.Join(dir, f.Name())
		data, err := os.ReadFile(path)
		if err != nil || f.IsDir() {
			continue
		}
		if at := bytes.Index(data, payload); at >= 0 {
			data[at+len(payload)-1] ^= 0xff
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			return true
		}
	}
	return false
}
