package fileutil

// DiskUsage is what statfs(2) says about the file system holding a path,
// in bytes. Used counts every allocated block; Avail is what an
// unprivileged writer may still allocate (the blocks reserved for root are
// neither), so Used+Avail can be less than Total, as in df(1).
type DiskUsage struct {
	Total, Used, Avail uint64
}

// UsedFraction is the share of the space writers can use that is used,
// df(1)'s "Use%": Used / (Used + Avail). 0 for an empty report.
func (u DiskUsage) UsedFraction() float64 {
	if u.Used+u.Avail == 0 {
		return 0
	}
	return float64(u.Used) / float64(u.Used+u.Avail)
}

// StatDisk reports the usage of the file system holding path. One system
// call, cheap enough to make several times a second. Linux: statfs(2) in
// fragment-size units. macOS and FreeBSD: statfs(2). Elsewhere: an error
// wrapping errors.ErrUnsupported, which callers treat as "never full".
func StatDisk(path string) (DiskUsage, error) { return statDisk(path) }
