//go:build unix

package walfs

import (
	"fmt"
	"os"
	"syscall"
)

type unixMapping struct{ data []byte }

func mapFile(f *os.File, size int64) (Mapping, error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, ErrNoMapping
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", f.Name(), err)
	}
	return &unixMapping{data: data}, nil
}

func (m *unixMapping) Bytes() []byte { return m.data }

func (m *unixMapping) Close() error {
	if m.data == nil {
		return nil
	}
	err := syscall.Munmap(m.data)
	m.data = nil
	return err
}
