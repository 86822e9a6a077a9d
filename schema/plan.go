package schema

import (
	"math"

	"orderlog/internal/apierr"
)

// plan is what registering a schema under a subject decides: the version
// it gets, and whether a new id is written.
type plan struct {
	version     Version
	fingerprint string
	newID       bool // the id is st.lastID+1, written with the schema
	existing    bool // the subject already has this schema: nothing to write
}

// planRegister decides a registration from what was read, without I/O:
// the subject's version with the same format and text if there is one,
// else a compatibility check and the next version, with the id of the
// same schema elsewhere or a new one.
func planRegister(st subjectState, candidate *Parsed, fp string) (plan, error) {
	for _, v := range st.versions {
		if fingerprint(v.Format, v.Text) == fp {
			return plan{version: v, fingerprint: fp, existing: true}, nil
		}
	}
	previous, err := parseAll(st.versions)
	if err != nil {
		return plan{}, err
	}
	if err := Check(st.level, candidate, previous); err != nil {
		return plan{}, err
	}
	p := plan{fingerprint: fp, version: Version{
		Version: len(st.versions) + 1, ID: st.reusableID, Format: candidate.Format, Text: candidate.Text,
	}}
	if p.version.ID == 0 {
		if st.lastID >= math.MaxUint32 { // messages carry ids in 32 bits
			return plan{}, apierr.New(apierr.Internal, "the registry has given out every schema id (%d)", st.lastID)
		}
		p.version.ID, p.newID = st.lastID+1, true
	}
	return p, nil
}
