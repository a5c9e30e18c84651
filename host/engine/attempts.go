package engine

import (
	"context"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// endAttempt records the attempt a (host.OpenAttempt of the task before its
// lease fields were cleared) as ended at now with outcome, in the
// transaction that ended it.
func endAttempt(ctx context.Context, tx store.Tx, a *host.Attempt, now time.Time, outcome host.AttemptOutcome, receiptID string) error {
	a.End(now, outcome)
	a.ReceiptID = receiptID
	return tx.InsertAttempt(ctx, a)
}
