package faultproxy

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
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
func socketInode(local, remote netip.AddrPort) string {
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if inode := findSocket(table, local, remote); inode != "" {
			return inode
		}
	}
	return ""
}

func findSocket(table string, local, remote netip.AddrPort) string {
	f, err := os.Open(table)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		l, okL := procAddr(fields[1])
		r, okR := procAddr(fields[2])
		if okL && okR && l == local && r == remote {
			return fields[9]
		}
	}
	return ""
}

// procAddr reads an address of /proc/net/tcp ("0100007F:1F90") or tcp6:
// the address is 32-bit words printed in the host's byte order, the port a
// plain hex number. An IPv4-mapped IPv6 address comes back as IPv4.
func procAddr(s string) (netip.AddrPort, bool) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, false
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	raw, err := hex.DecodeString(h)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, false
	}
	b := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), true
}
