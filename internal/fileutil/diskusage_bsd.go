//go:build darwin || freebsd

package fileutil

import "golang.org/x/sys/unix"

func statDisk(path string) (DiskUsage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return DiskUsage{}, err
	}
	unit := uint64(st.Bsize)
	return DiskUsage{Total: uint64(st.Blocks) * unit, Used: uint64(st.Blocks-st.Bfree) * unit, Avail: uint64(st.Bavail) * unit}, nil
}
