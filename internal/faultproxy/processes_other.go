//go:build !linux

package faultproxy

import "net"

// name cannot tell a connection's process without Linux's /proc.
func name(net.Conn, map[int]string) string { return "" }
