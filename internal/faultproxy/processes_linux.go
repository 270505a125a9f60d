package faultproxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
)

// name finds the process among names that holds the socket at c's other
// end, on this host: /proc/net/tcp (and tcp6) lists every TCP socket with
// its two addresses and its inode, and /proc/PID/fd links each descriptor
// of a process to "socket:[inode]". The other end of c is the socket whose
// local address is c's remote one, and whose remote address is c's local
// one.
func name(c net.Conn, names map[int]string) string {
	local, err1 := netip.ParseAddrPort(c.RemoteAddr().String())
	remote, err2 := netip.ParseAddrPort(c.LocalAddr().String())
	if err1 != nil || err2 != nil || len(names) == 0 {
		return ""
	}
	inode := socketInode(local, remote)
	if inode == "" {
		return ""
	}
	target := "socket:[" + inode + "]"
	for pid, n := range names {
		dir := "/proc/" + strconv.Itoa(pid) + "/fd"
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if link, err := os.Readlink(dir + "/" + fd.Name()); err == nil && link == target {
				return n
			}
		}
	}
	return ""
}

// socketInode is the inode of the TCP socket with these addresses, or "".
// A busy host lists thousands of sockets, so each line is matched as
// bytes against the two addresses written the way the table writes them,
// and only the matching line is split.
func socketInode(local, remote netip.AddrPort) string {
	if local.Addr().Is4() && remote.Addr().Is4() {
		if inode := findSocket("/proc/net/tcp", procAddr(local)+" "+procAddr(remote)); inode != "" {
			return inode
		}
	}
	return findSocket("/proc/net/tcp6", procAddr6(local)+" "+procAddr6(remote))
}

func findSocket(table, addrs string) string {
	f, err := os.Open(table)
	if err != nil {
		return ""
	}
	defer f.Close()
	want := []byte(addrs)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl: local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
		line := sc.Bytes()
		if !bytes.Contains(line, want) {
			continue
		}
		if fields := bytes.Fields(line); len(fields) >= 10 && string(fields[1])+" "+string(fields[2]) == addrs {
			return string(fields[9])
		}
	}
	return ""
}

// procAddr writes an IPv4 address and port as /proc/net/tcp does: the
// address as one 32-bit word in the host's byte order, in hex, and the
// port in hex.
func procAddr(a netip.AddrPort) string {
	ip := a.Addr().As4()
	return fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(ip[:]), a.Port())
}

// procAddr6 writes an address as /proc/net/tcp6 does: four 32-bit words,
// an IPv4 address mapped into IPv6.
func procAddr6(a netip.AddrPort) string {
	ip := a.Addr().As16()
	s := ""
	for i := 0; i < 16; i += 4 {
		s += fmt.Sprintf("%08X", binary.NativeEndian.Uint32(ip[i:]))
	}
	return fmt.Sprintf("%s:%04X", s, a.Port())
}
