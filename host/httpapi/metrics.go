package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Metrics holds the gate's Prometheus metrics, after the spec's Monitoring
// section. Counters and histograms are fed by engine events (wire OnEvent into
// engine.Config.OnEvent); gauges are computed at scrape time from
// engine.Stats and the worker registry, so they cost nothing between scrapes.
type Metrics struct {
	reg *prometheus.Registry

	queued, completed, failed, retried, dead, leased, expired, canceled, released, accepted, snoozed *prometheus.CounterVec
	appended                                                                                         *prometheus.CounterVec
	policyFaults                                                                                     *prometheus.CounterVec
	duration                                                                                         *prometheus.HistogramVec
	wait                                                                                             *prometheus.HistogramVec
	httpDur                                                                                          *prometheus.HistogramVec
	gauges                                                                                           *prometheus.Registry // the scrape-time gauges of every tenant
	eng                                                                                              *engine.Engine
	st                                                                                               store.Store
	rl                                                                                               *resourceLeaseMetrics // resource leases (KLIS-3)
	delivery                                                                                         *deliveryMetrics
}

// NewMetrics returns Metrics on a fresh registry that also carries the Go
// runtime and process collectors.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cv := func(name, help string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "asyncgate", Name: name, Help: help}, []string{"tenant", "task_type"})
		reg.MustRegister(c)
		return c
	}
	m := &Metrics{reg: reg,
		queued:    cv("tasks_queued_total", "Tasks queued (duplicates of an idempotency key excluded)."),
		completed: cv("tasks_completed_total", "Tasks completed successfully."),
		failed:    cv("tasks_failed_total", "Failed attempts reported by workers."),
		retried:   cv("tasks_retried_total", "Failed attempts scheduled for a retry."),
		dead:      cv("tasks_dead_lettered_total", "Tasks moved to the dead letter queue."),
		leased:    cv("leases_granted_total", "Lease offers granted."),
		expired:   cv("leases_expired_total", "Leases that expired (worker lost)."),
		canceled:  cv("tasks_canceled_total", "Tasks canceled."),
		released:  cv("leases_released_total", "Leases released back to the queue by workers."),
		accepted:  cv("leases_accepted_total", "Offers accepted by workers (task.accepted receipts)."),
		snoozed:   cv("leases_snoozed_total", "Leases given back by workers until a later time (snooze), no attempt used."),
	}
	m.appended = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "asyncgate", Name: "receipts_appended_total", Help: "Receipts appended by principals through the receipts API."}, []string{"tenant"})
	m.policyFaults = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "asyncgate", Name: "policy_faults_total", Help: "Retry policy faults (the built-in default decided instead)."}, []string{"tenant", "task_type"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "asyncgate", Name: "task_duration_seconds",
		Help: "Time from lease to completion or failure.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 12)}, []string{"tenant", "task_type", "outcome"})
	m.wait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "asyncgate", Name: "task_wait_seconds",
		Help: "Time from a task becoming available to its lease.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 12)}, []string{"tenant"})
	m.httpDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "asyncgate", Name: "http_request_duration_seconds",
		Help:    "HTTP request latency by route and status.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"method", "route", "code"})
	reg.MustRegister(m.appended, m.policyFaults, m.duration, m.wait, m.httpDur)
	m.rl = newResourceLeaseMetrics(reg)
	m.delivery = newDeliveryMetrics(reg)
	return m
}

// Registry returns the registry, to add collectors (plugins, MCP) to.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// OnEvent counts an engine event. It is cheap and safe for concurrent use.
func (m *Metrics) OnEvent(ev engine.Event) {
	switch ev.Kind {
	case engine.EvEnqueued:
		m.queued.WithLabelValues(ev.Tenant, ev.TaskType).Inc()
	case engine.EvLeased:
		m.leased.WithLabelValues(ev.Tenant, ev.TaskType).Inc()
		if ev.Duration >= 0 {
			m.wait.WithLabelValues(ev.Tenant).Observe(ev.Duration.Seconds())
		}
	case engine.EvAccepted:
		m.accepted.WithLabelValues(ev.Tenant, ev.TaskType).Inc()
	case engine.EvCompleted:
		m.completed.WithLabelValues(ev.Tenant, ev.TaskType).Inc()
		m.duration.WithLabelValues(ev.Tenant, ev.TaskType, "completed").Observe(ev.Duration.Seconds())
	case engine.EvFailed:
		m.failed.WithLabelValues(ev.Tenant, ev.TaskType).Inc()
		m.duration.WithLabelValues(ev.Tenant, ev.TaskType, "failed").Observe(ev.Duration.Seconds())
	case engine.EvRetried:
		m.retried.WithLabelValues(ev.Tenant, ev.TaskType).Inc()
	case engine.EvDeadLettered:
		m.dead.WithLabelValues(ev.Tenant, ev.TaskType).Inc()
	case engine.EvLeaseExpired:
		m.expired.WithLabelValues(ev.Tenant, ev.TaskType).Inc()
	case engine.EvReleased:
		m.released.WithLabelValues(ev.Tenant, ev.TaskType).Inc()
	case engine.EvSnoozed:
		m.snoozed.WithLabelValues(ev.Tenant, ev.TaskType).Inc()
	case engine.EvCanceled:
		m.canceled.WithLabelValues(ev.Tenant, ev.TaskType).Inc()
	case engine.EvReceipt:
		m.appended.WithLabelValues(ev.Tenant).Inc()
	case engine.EvPolicyFault:
		m.policyFaults.WithLabelValues(ev.Tenant, ev.TaskType).Inc()
	default:
		m.rl.onEvent(ev)
		m.delivery.onEvent(ev)
	}
}

// watch registers the scrape-time gauges over an engine and its store.
func (m *Metrics) watch(eng *engine.Engine, st store.Store) {
	m.eng, m.st = eng, st
	m.gauges = prometheus.NewRegistry()
	m.gauges.MustRegister(&gaugeCollector{eng: eng, st: st})
	m.gauges.MustRegister(resourceHeldCollector{eng: eng})
	m.gauges.MustRegister(outboxCollector{eng})
	if ws, ok := st.(store.WriterStatser); ok {
		m.gauges.MustRegister(writerCollector{ws})
	}
}

// handler serves every metric to the gate's operators (admins of the
// default tenant) and to anyone when /metrics is public. An admin of
// another tenant gets its tenant's view: the series labelled with its
// tenant, and the queue and worker gauges computed for its tenant alone;
// gate-wide series (runtime, HTTP, plugins, the ledger) are left out.
func (m *Metrics) handler(public bool) echo.HandlerFunc {
	var all prometheus.Gatherer = m.reg
	if m.gauges != nil {
		all = prometheus.Gatherers{m.reg, m.gauges}
	}
	full := promhttp.HandlerFor(all, promhttp.HandlerOpts{})
	return func(c echo.Context) error {
		a, ok := auth.ActorFromContext(c.Request().Context())
		if !public && auth.ServedStale(c.Request().Context()) {
			// The key was taken on the cache's word while the store did
			// not answer: nothing the store backs, only the process's own
			// series (the caller's tenant's, for a tenant admin).
			var own prometheus.Gatherer = m.reg
			if a.Tenant != auth.DefaultTenant {
				own = tenantGatherer{m.reg, a.Tenant}
			}
			failed := prometheus.NewRegistry()
			failed.MustRegister(scrapeFailed{})
			promhttp.HandlerFor(prometheus.Gatherers{own, failed}, promhttp.HandlerOpts{}).ServeHTTP(c.Response(), c.Request())
			return nil
		}
		if public || !ok || a.Tenant == auth.DefaultTenant {
			full.ServeHTTP(c.Response(), c.Request())
			return nil
		}
		own := prometheus.NewRegistry()
		if m.eng != nil {
			own.MustRegister(&gaugeCollector{eng: m.eng, st: m.st, tenant: a.Tenant})
			own.MustRegister(resourceHeldCollector{eng: m.eng, tenant: a.Tenant})
		}
		h := promhttp.HandlerFor(prometheus.Gatherers{tenantGatherer{m.reg, a.Tenant}, own}, promhttp.HandlerOpts{})
		h.ServeHTTP(c.Response(), c.Request())
		return nil
	}
}

// scrapeFailed is asyncgate_scrape_error at 1 alone: the store-backed
// gauges were not read.
type scrapeFailed struct{}

func (scrapeFailed) Describe(ch chan<- *prometheus.Desc) { ch <- descScrapeError }

func (scrapeFailed) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descScrapeError, prometheus.GaugeValue, 1)
}

// tenantGatherer keeps the series of g labelled tenant=tenant.
type tenantGatherer struct {
	g      prometheus.Gatherer
	tenant string
}

func (t tenantGatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := t.g.Gather()
	out := mfs[:0]
	for _, mf := range mfs {
		keep := mf.Metric[:0]
		for _, met := range mf.Metric {
			for _, lp := range met.GetLabel() {
				if lp.GetName() == "tenant" && lp.GetValue() == t.tenant {
					keep = append(keep, met)
					break
				}
			}
		}
		if len(keep) > 0 {
			mf.Metric = keep
			out = append(out, mf)
		}
	}
	return out, err
}

// middleware times every request by route template and status.
func (m *Metrics) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err) // write the error answer now, so its status is known
		}
		route := c.Path()
		if route == "" || route == "/*" {
			route = "unmatched"
		}
		m.httpDur.WithLabelValues(c.Request().Method, route, strconv.Itoa(c.Response().Status)).Observe(time.Since(start).Seconds())
		return nil
	}
}

// activeWindow is how recently a worker must have been seen to count as active.
const activeWindow = 60 * time.Second

var (
	descByState     = prometheus.NewDesc("asyncgate_tasks_by_state", "Tasks by state.", []string{"state"}, nil)
	descByType      = prometheus.NewDesc("asyncgate_tasks_by_type", "Queued and leased tasks by task type.", []string{"task_type"}, nil)
	descQueueDepth  = prometheus.NewDesc("asyncgate_task_queue_depth", "Queued tasks ready to lease (not scheduled for later, not of a paused type).", nil, nil)
	descOldest      = prometheus.NewDesc("asyncgate_oldest_pending_task_age_seconds", "Longest a queued task ready to lease has waited since it became ready, among the 100 queued tasks of each type and priority from the first ready one in queue order (a paused type's are not ready).", nil, nil)
	descPaused      = prometheus.NewDesc("asyncgate_tasks_paused", "Queued tasks of a task type whose leasing is paused, by type (every paused type, 0 when it holds none).", []string{"task_type"}, nil)
	descWorkers     = prometheus.NewDesc("asyncgate_workers_active", "Workers seen in the last minute.", nil, nil)
	descHeartbeat   = prometheus.NewDesc("asyncgate_worker_heartbeat_age_seconds", "Seconds since each worker was last seen (lease or heartbeat).", []string{"tenant", "worker_id"}, nil)
	descWorkflows   = prometheus.NewDesc("asyncgate_workflows", "Workflows by state.", []string{"state"}, nil)
	descReceipts    = prometheus.NewDesc("asyncgate_receipts_total", "Receipts in the ledger.", nil, nil)
	descSettlements = prometheus.NewDesc("asyncgate_dependency_settlements_pending", "Finished tasks whose waiters a cascade left for the drainers to settle in later transactions (gate-wide).", nil, nil)
	descScrapeError = prometheus.NewDesc("asyncgate_scrape_error", "1 if reading the store for these gauges failed.", nil, nil)
)

// gaugeCollector computes the queue and worker gauges at scrape time.
type gaugeCollector struct {
	eng *engine.Engine
	st  store.Store
	// tenant, when set, limits the gauges to one tenant (a tenant admin's
	// scrape) and leaves out the gate-wide ledger size.
	tenant string
}

func (g *gaugeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descByState, descByType, descQueueDepth, descOldest, descPaused, descWorkers, descHeartbeat, descWorkflows, descReceipts, descSettlements, descScrapeError} {
		ch <- d
	}
}

func (g *gaugeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	failed := 0.0
	if qs, err := g.eng.Stats(ctx, g.tenant); err == nil {
		for st, n := range withEveryState(qs.ByState) {
			ch <- prometheus.MustNewConstMetric(descByState, prometheus.GaugeValue, float64(n), string(st))
		}
		for tt, n := range qs.ByType {
			ch <- prometheus.MustNewConstMetric(descByType, prometheus.GaugeValue, float64(n), tt)
		}
		ch <- prometheus.MustNewConstMetric(descQueueDepth, prometheus.GaugeValue, float64(qs.ReadyQueued()))
		ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, qs.OldestReadyAge.Seconds())
		for tt, n := range qs.Paused {
			ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, float64(n), tt)
		}
	} else {
		failed = 1
	}
	if wfs, err := g.eng.WorkflowCounts(ctx, g.tenant); err == nil {
		for st, n := range wfs {
			ch <- prometheus.MustNewConstMetric(descWorkflows, prometheus.GaugeValue, float64(n), string(st))
		}
	} else {
		failed = 1
	}
	// Workers are registered per tenant; the tenants are those that have keys.
	tenants := map[string]bool{auth.DefaultTenant: true}
	active := 0
	now := g.eng.Clock().Now()
	err := g.st.View(ctx, func(r store.Reader) error {
		ks, err := r.ListKeys(ctx)
		if err != nil {
			return err
		}
		for _, k := range ks {
			tenants[k.Tenant] = true
		}
		if g.tenant != "" {
			tenants = map[string]bool{g.tenant: true}
		}
		for t := range tenants {
			ws, err := r.ListWorkers(ctx, t)
			if err != nil {
				return err
			}
			for _, w := range ws {
				age := now.Sub(w.LastSeen)
				if age < activeWindow {
					active++
				}
				ch <- prometheus.MustNewConstMetric(descHeartbeat, prometheus.GaugeValue, age.Seconds(), t, w.ID)
			}
		}
		return nil
	})
	if err != nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(descWorkers, prometheus.GaugeValue, float64(active))
	if g.tenant == "" {
		var n int64
		if err := g.st.View(ctx, func(r store.Reader) error {
			var err error
			n, err = r.CountPendingSettlements(ctx)
			return err
		}); err == nil {
			ch <- prometheus.MustNewConstMetric(descSettlements, prometheus.GaugeValue, float64(n))
		} else {
			failed = 1
		}
	}
	if hk, ok := g.st.(interface {
		LedgerHead(ctx context.Context) (int64, string, error)
	}); ok && g.tenant == "" {
		if seq, _, err := hk.LedgerHead(ctx); err == nil {
			ch <- prometheus.MustNewConstMetric(descReceipts, prometheus.CounterValue, float64(seq))
		}
	}
	ch <- prometheus.MustNewConstMetric(descScrapeError, prometheus.GaugeValue, failed)
}

var _ http.Handler = (*echo.Echo)(nil)
