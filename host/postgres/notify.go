package postgres

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncgate/asyncgate/host/store"
)

// Subscribe implements store.Notifier. It LISTENs on a connection of its own
// and forwards the tenant of every notification another host's commit sent
// (this host's own are skipped: the engine wakes its local waiters itself;
// but a store.ReofferNotice is forwarded from this host too, as its engine
// learns of the tasks a release re-offered only through it). A
// lost connection is re-established with backoff. Wake-ups are hints: when the
// consumer is slow, notifications are coalesced rather than queued without
// bound. The channel is closed when ctx is done or the store is closed.
//
// The first notification, and the first after every reconnection, is
// store.NotifyEveryone: waiters that parked before the LISTEN began may
// have missed a notification.
//
// Subscribe does not fail when the database is briefly unreachable: the
// engine gives up on cross-host wake-ups for good when it does, so the
// listener keeps trying in the background instead.
func (s *Store) Subscribe(ctx context.Context) (<-chan string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	conn, err := s.listen(ctx)
	if err != nil {
		conn = nil // connect in the loop below
	}
	out := make(chan string, 256)
	if conn != nil {
		// The consumer may have parked waiters before this LISTEN began
		// (an engine subscribes in the background as it starts): what was
		// notified before it was missed, so the first word is "look again".
		out <- store.NotifyEveryone
	}
	go func() {
		defer close(out)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-s.queue.Closing():
				cancel()
			case <-ctx.Done():
			}
		}()
		backoff := 50 * time.Millisecond
		for {
			if conn == nil {
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				if backoff < 5*time.Second {
					backoff *= 2
				}
				if conn, err = s.listen(ctx); err != nil {
					conn = nil
					continue
				}
				backoff = 50 * time.Millisecond
				// Whatever was notified while no connection listened was
				// missed: every queue may have changed. This one is not
				// coalesced away: it waits for room.
				select {
				case out <- store.NotifyEveryone:
				case <-ctx.Done():
					return
				}
			}
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				conn.Close(context.Background())
				conn = nil
				if ctx.Err() != nil {
					return
				}
				continue
			}
			if s.ownPID(n.PID) && !strings.HasPrefix(n.Payload, store.ReofferNoticePrefix) {
				continue
			}
			if n.Payload == store.KeysRevokedNotice {
				// Not a hint: a host that missed it would keep a
				// revoked key for its cache time. It waits for room.
				select {
				case out <- n.Payload:
				case <-ctx.Done():
					return
				}
				continue
			}
			select {
			case out <- n.Payload:
			default: // the consumer is behind; it will look at the queues anyway
			}
		}
	}()
	return out, nil
}

// listen opens a connection outside the pool and LISTENs on the channel.
func (s *Store) listen(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, s.connCfg.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(cctx, `LISTEN `+pgx.Identifier{s.opts.Channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

func (s *Store) ownPID(pid uint32) bool {
	s.pidMu.Lock()
	defer s.pidMu.Unlock()
	return s.writerPIDs[pid]
}
