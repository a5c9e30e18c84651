package postgres

import (
	"strings"
	"syscall"
)

// tcpUserTimeout is TCP_USER_TIMEOUT (linux/tcp.h), which the syscall
// package does not name.
const tcpUserTimeout = 0x12

// sockControl sets TCP_USER_TIMEOUT on a TCP connection: data sent and not
// acknowledged for userTimeout fails the connection (it also ends the
// keepalive probes' wait). A kernel that refuses it leaves the connection
// as it is.
func sockControl(network, _ string, c syscall.RawConn) error {
	if !strings.HasPrefix(network, "tcp") {
		return nil
	}
	return c.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(userTimeout.Milliseconds()))
	})
}
