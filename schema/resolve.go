package schema

import (
	"context"
	"encoding/json"
	"fmt"
)

// IDVersion says which version of a subject a schema id is, as of an etcd
// revision.
type IDVersion struct {
	// Version is the subject's version with the id; 0 when none has it.
	Version int
	// Registered is the revision that version was registered at (its
	// key's create revision); 0 when none.
	Registered int64
	// AsOf is the revision the answer was read at.
	AsOf int64
}

// VersionOfID finds the version of subject whose schema has global id id
// (a subject holds a schema once, so at most one). Versions are immutable
// and never deleted: a version found holds forever, with the same
// Registered; "none" holds at every revision up to AsOf, and a version
// registered later has Registered above AsOf. The tiering worker
// (tiering/schemas.go) relies on both to resolve the same way every time.
func (r *Registry) VersionOfID(ctx context.Context, subject string, id int64) (IDVersion, error) {
	resp, err := r.store.etcd.Get(ctx, versionsOf(subject), versionsRange()...)
	if err != nil {
		return IDVersion{}, err
	}
	out := IDVersion{AsOf: resp.Header.Revision}
	for _, kv := range resp.Kvs {
		var rec versionRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return IDVersion{}, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		if rec.ID == id {
			out.Version, out.Registered = rec.Version, kv.CreateRevision
			return out, nil
		}
	}
	return out, nil
}
