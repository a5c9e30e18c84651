package ui

import (
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// verifier runs whole-ledger verifications one at a time, in the
// background: one reads every receipt, far too long for a page to wait on
// with a large ledger, so pages show the last outcome.
type verifier struct {
	mu      sync.Mutex
	running bool
	started time.Time
	by      string
	last    *verifyOutcome
}

type verifyOutcome struct {
	Report *engine.VerifyReport
	Err    string
	At     time.Time
	Took   time.Duration
	By     string
}

// ledgerData is the ledger page's polled part. A tenant admin's holds no
// gate-wide figure: no chain or checkpoint counts, no head hash, and of the
// last verification only when it ran and whether it passed.
type ledgerData struct {
	Operator bool
	Tenant   string
	Running  bool
	Started  time.Time
	Last     *verifyOutcome
	Chains   int
	HeadSeq  int64 // the checkpoint chain's head id
	CSRF     string
}

func (u *UI) ledgerState(c echo.Context) (*ledgerData, error) {
	s := sessionOf(c)
	ctx := c.Request().Context()
	if !s.operator() {
		u.verify.mu.Lock()
		defer u.verify.mu.Unlock()
		d := &ledgerData{Tenant: s.tenant, Running: u.verify.running, Started: u.verify.started, CSRF: s.csrf}
		if l := u.verify.last; l != nil {
			// When and whether: the counts, head hash and first bad
			// receipt are the whole gate's, other tenants' included.
			d.Last = &verifyOutcome{At: l.At, Took: l.Took, Report: &engine.VerifyReport{OK: l.Err == "" && l.Report != nil && l.Report.OK}}
			if l.Err != "" {
				d.Last.Err = "see the gate's operators"
			}
		}
		return d, nil
	}
	var heads store.LedgerHeads
	if err := u.st.View(ctx, func(r store.Reader) error {
		var err error
		heads, err = r.LedgerHeads(ctx)
		return err
	}); err != nil {
		return nil, err
	}
	u.verify.mu.Lock()
	defer u.verify.mu.Unlock()
	d := &ledgerData{Operator: true, Tenant: s.tenant, Running: u.verify.running, Started: u.verify.started,
		Last: u.verify.last, Chains: len(heads.Chains), HeadSeq: heads.Checkpoint.Seq, CSRF: s.csrf}
	return d, nil
}

// ledger is GET /ui/ledger: the last verification's outcome, and (for
// operators) a button to run one.
func (u *UI) ledger(c echo.Context) error {
	d, err := u.ledgerState(c)
	if err != nil {
		return err
	}
	return u.render(c, http.StatusOK, "ledger", u.newPage(c, "Ledger", "ledger", d))
}

// ledgerFragment is GET /ui/fragments/ledger, polled while a run is on.
func (u *UI) ledgerFragment(c echo.Context) error {
	d, err := u.ledgerState(c)
	if err != nil {
		return err
	}
	if !d.Running {
		c.Response().Header().Set("X-Poll-Stop", "1")
	}
	return u.fragment(c, "ledgerstatus", d)
}

// startVerify is POST /ui/ledger/verify. The ledger is the gate's, across
// tenants, so only operators may run it.
func (u *UI) startVerify(c echo.Context) error {
	s := sessionOf(c)
	if !s.operator() {
		return host.Errorf(host.CodeForbidden, "verifying the whole ledger is for admins of the default tenant")
	}
	u.verify.mu.Lock()
	if !u.verify.running {
		u.verify.running, u.verify.started, u.verify.by = true, time.Now(), s.principal
		go u.runVerify()
	}
	u.verify.mu.Unlock()
	return c.Redirect(http.StatusSeeOther, "/ui/ledger")
}

func (u *UI) runVerify() {
	start := time.Now()
	rep, err := u.eng.VerifyLedger(u.ctx)
	out := &verifyOutcome{Report: rep, At: time.Now(), Took: time.Since(start).Round(time.Millisecond)}
	if err != nil {
		out.Err = err.Error()
	}
	u.verify.mu.Lock()
	out.By = u.verify.by
	u.verify.running, u.verify.last = false, out
	u.verify.mu.Unlock()
	if err != nil {
		u.log.Warn("ledger verification failed to run", "err", err)
	} else if !rep.OK {
		u.log.Error("ledger verification found a problem", "first_bad", rep.FirstBad, "problem", rep.Problem)
	}
}
