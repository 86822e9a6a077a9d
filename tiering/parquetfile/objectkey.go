package parquetfile

import (
	"fmt"
	"strings"
	"time"
)

// ObjectKey returns the object key of the archive file of [first, end):
// PREFIX/dt=YYYY-MM-DD/<first:020d>-<last:020d>.parquet, where last = end-1
// and dt is the UTC date of the first row's ingest time. Keys sort in offset
// order within and across days. An empty prefix gives a key without a
// leading slash; a prefix's trailing slashes are dropped. end must be above
// first.
func ObjectKey(prefix string, first, end uint64, firstIngest time.Time) string {
	name := fmt.Sprintf("dt=%s/%020d-%020d.parquet", firstIngest.UTC().Format(time.DateOnly), first, end-1)
	if prefix = strings.TrimRight(prefix, "/"); prefix == "" {
		return name
	}
	return prefix + "/" + name
}
