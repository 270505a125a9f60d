//go:build !linux

package faultproxy

import "net"

// write sends b on c.
func write(c net.Conn, b []byte) error {
	_, err := c.Write(b)
	return err
}
