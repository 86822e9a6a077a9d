package producer

// offsetWindow remembers the offsets of the last len(slots) durable seqs.
// Invariant: slots[seq % len(slots)] holds seq's offset for every seq in
// [lowest, highest], and lowest > highest-len(slots).
type offsetWindow struct {
	slots   []uint64
	lowest  uint64 // first remembered seq
	highest uint64 // last remembered seq
	empty   bool
}

func newOffsetWindow(size int) offsetWindow {
	return offsetWindow{slots: make([]uint64, size), empty: true}
}

// put records seq, which is the seq after the last one put (or the first).
func (w *offsetWindow) put(seq, offset uint64) {
	size := uint64(len(w.slots))
	w.slots[seq%size] = offset
	if w.empty || seq != w.highest+1 {
		w.lowest, w.empty = seq, false
	}
	w.highest = seq
	if w.highest-w.lowest >= size {
		w.lowest = w.highest - size + 1
	}
}

func (w *offsetWindow) get(seq uint64) (uint64, bool) {
	if w.empty || seq < w.lowest || seq > w.highest {
		return 0, false
	}
	return w.slots[seq%uint64(len(w.slots))], true
}

// offsets returns the remembered offsets in seq order, ending at end-1.
func (w *offsetWindow) offsets(end uint64) []uint64 {
	if w.empty || w.highest+1 != end {
		return nil
	}
	out := make([]uint64, 0, w.highest-w.lowest+1)
	for seq := w.lowest; seq <= w.highest; seq++ {
		out = append(out, w.slots[seq%uint64(len(w.slots))])
	}
	return out
}
