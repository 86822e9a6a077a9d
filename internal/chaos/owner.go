package chaos

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// socketOwner finds which of the given processes holds the dialling end of
// an accepted loopback connection: the kernel's TCP table (/proc/net/tcp)
// gives the socket inode of the connection whose local address is the
// accepted connection's remote one, and /proc/<pid>/fd shows which process
// has that inode open. It returns "" when none of pids holds it.
func socketOwner(conn net.Conn, pids map[string]int) string {
	remote, ok := conn.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return ""
	}
	local, ok := conn.LocalAddr().(*net.TCPAddr)
	if !ok {
		return ""
	}
	inode := socketInode(remote.Port, local.Port)
	if inode == "" {
		return ""
	}
	want := "socket:[" + inode + "]"
	for name, pid := range pids {
		if holdsSocket(pid, want) {
			return name
		}
	}
	return ""
}

// socketInode is the inode of the TCP socket bound to localPort and
// connected to remotePort, from /proc/net/tcp and /proc/net/tcp6.
func socketInode(localPort, remotePort int) string {
	local := fmt.Sprintf(":%04X", localPort)
	remote := fmt.Sprintf(":%04X", remotePort)
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		scanner := bufio.NewScanner(f)
		for scanner.Scan() {
			fields := strings.Fields(scanner.Text())
			if len(fields) < 10 {
				continue
			}
			if strings.HasSuffix(fields[1], local) && strings.HasSuffix(fields[2], remote) {
				f.Close()
				return fields[9]
			}
		}
		f.Close()
	}
	return ""
}

func holdsSocket(pid int, socket string) bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && target == socket {
			return true
		}
	}
	return false
}
