package fileutil

import "golang.org/x/sys/unix"

func statDisk(path string) (DiskUsage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return DiskUsage{}, err
	}
	// Block counts are in f_frsize units; f_bsize is the preferred I/O size
	// and differs from it on some file systems.
	unit := uint64(st.Frsize)
	if unit == 0 {
		unit = uint64(st.Bsize)
	}
	return DiskUsage{Total: st.Blocks * unit, Used: (st.Blocks - st.Bfree) * unit, Avail: st.Bavail * unit}, nil
}
