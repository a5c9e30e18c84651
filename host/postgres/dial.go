package postgres

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// connectTimeout bounds opening one connection (dial, TLS, start-up,
// authentication) when the URL names no connect_timeout: pgxpool goes on
// opening a connection in the background after its caller gave up, for up
// to two minutes, holding a place in the pool, so a server that takes
// connections and never answers would otherwise fill the pool with
// connections that never open.
const connectTimeout = 10 * time.Second

// Keepalives of every connection: a peer that stops answering (a partition,
// a host gone) is found within about keepAliveIdle + keepAliveCount ×
// keepAliveInterval on a connection that waits for an answer, and within
// userTimeout of data sent and not acknowledged (Linux, TCP_USER_TIMEOUT),
// instead of the system's two hours or fifteen minutes. A call waiting on
// such a connection then fails and the connection is dropped, which
// matters most to those no caller's timeout bounds: the LISTEN
// connection, a long read.
const (
	keepAliveIdle     = 15 * time.Second
	keepAliveInterval = 5 * time.Second
	keepAliveCount    = 3
	userTimeout       = 30 * time.Second
)

// dialBounded gives cc a connect timeout (unless the URL set one) and a
// dialer with the keepalives above.
func dialBounded(cc *pgx.ConnConfig) {
	if cc.ConnectTimeout <= 0 {
		cc.ConnectTimeout = connectTimeout
	}
	d := &net.Dialer{
		Timeout: cc.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle,
			Interval: keepAliveInterval, Count: keepAliveCount},
		Control: sockControl,
	}
	cc.DialFunc = d.DialContext
}

// serverKeepalives has the server probe each pooled connection as the gate
// does (tcp_keepalives_*, session settings any role may change): a
// transaction whose gate lost its connection in a partition (a batch given
// up at Options.Timeout) is otherwise kept open by the server, with its row
// locks, until the system's keepalive finds the peer gone, two hours by
// default, and the writer that reconnects waits on its own old locks (its
// chain's row) all that time. They are set once a connection is open,
// within connectTimeout, not as start-up parameters (a pooler in front of
// the server may refuse unknown ones); a server that refuses them leaves
// the connection as it is. Unix-socket connections ignore them.
func serverKeepalives(cfg *pgxpool.Config) {
	prev := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if prev != nil {
			if err := prev(ctx, c); err != nil {
				return err
			}
		}
		ctx, cancel := context.WithTimeout(ctx, connectTimeout)
		defer cancel()
		_, err := c.Exec(ctx, `SELECT set_config('tcp_keepalives_idle', $1, false), set_config('tcp_keepalives_interval', $2, false), set_config('tcp_keepalives_count', $3, false)`,
			itoa(keepAliveIdle.Seconds()), itoa(keepAliveInterval.Seconds()), itoa(keepAliveCount))
		if err != nil && ctx.Err() != nil {
			return err // the server did not answer: this connection is no good
		}
		return nil
	}
}

func itoa[N float64 | int](n N) string { return strconv.Itoa(int(n)) }
