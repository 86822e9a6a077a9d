package wal

import "errors"

// keyProbes are, per segment, the first and last entry records recovery
// found in it: Open reads them to check that the keys can decrypt what the
// journal holds (checkKeys). A run seals every record under one key and
// writes segments of its own (each Open starts a new one), so the records
// of a segment share one key id.
type keyProbes map[uint32][]position

// note remembers seq's first and last entry records among metas.
func (p keyProbes) note(seq uint32, metas []recordMeta) {
	var probes []position
	for _, m := range metas {
		if m.Type != RecordEntry {
			continue
		}
		pos := position{seg: seq, off: m.Offset, size: m.Size}
		if len(probes) < 2 {
			probes = append(probes, pos)
		} else {
			probes[1] = pos
		}
	}
	if probes != nil {
		p[seq] = probes
	}
}

// checkKeys fails with a *KeyError if a segment holds encrypted records
// under a key id the store lacks (or no keys at all), or whose key does
// not decrypt them: neither probe authenticates, which is a wrong key, not
// one altered record (that one answers UNKNOWN when read). A probe that
// does not decode is damage, answered on reads as everywhere else.
func (s *Store) checkKeys(probes keyProbes) error {
	for _, seq := range s.mu.segments {
		var wrongKey *KeyError
		for _, pos := range probes[seq] {
			r, buf, err := s.readRaw(pos)
			if err != nil || r.Flags&flagEncrypted == 0 {
				wrongKey = nil
				break
			}
			id, _ := sealedKeyID(r.Payload)
			_, err = s.cfg.Keys.open(buf, r.Payload)
			var ke *KeyError
			if errors.As(err, &ke) {
				ke.Segment, ke.NoKeys = segmentName(seq), s.cfg.Keys == nil
				return ke
			}
			if err == nil {
				wrongKey = nil
				break
			}
			wrongKey = &KeyError{KeyID: id, Segment: segmentName(seq)}
		}
		if wrongKey != nil {
			return wrongKey
		}
	}
	return nil
}
