package fileutil

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// preallocate reserves, with F_PREALLOCATE, the bytes of [0, size) that f
// does not have allocated yet. The reservation starts at the file's physical
// end (F_PEOFPOSMODE) and never changes its length, as FALLOC_FL_KEEP_SIZE
// does on Linux. All or nothing (F_ALLOCATEALL); a file system without
// preallocation (ENOTSUP) is not an error, since the call is advisory.
func preallocate(f *os.File, size int64) error {
	return control(f, func(fd uintptr) error {
		var st unix.Stat_t
		if err := unix.Fstat(int(fd), &st); err != nil {
			return err
		}
		allocated := st.Blocks * 512 // st_blocks counts 512-byte units
		if allocated >= size {
			return nil
		}
		store := unix.Fstore_t{Flags: unix.F_ALLOCATEALL, Posmode: unix.F_PEOFPOSMODE, Length: size - allocated}
		err := unix.FcntlFstore(fd, unix.F_PREALLOCATE, &store)
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return err
	})
}
