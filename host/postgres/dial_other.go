//go:build !linux

package postgres

import "syscall"

// sockControl sets nothing beyond the keepalives outside Linux.
func sockControl(network, address string, c syscall.RawConn) error { return nil }
