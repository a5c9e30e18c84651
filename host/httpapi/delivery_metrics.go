package httpapi

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncgate/asyncgate/host/engine"
)

// deliveryMetrics counts what retention and the outbox did (issue 13).
type deliveryMetrics struct {
	archived, purged, retentionErrors *prometheus.CounterVec
	outbox                            *prometheus.CounterVec
}

func newDeliveryMetrics(reg *prometheus.Registry) *deliveryMetrics {
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "asyncgate", Name: name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	return &deliveryMetrics{
		archived:        cv("tasks_archived_total", "Finished tasks archived by retention.", "tenant", "task_type"),
		purged:          cv("payloads_purged_total", "Result payloads archived through their channel and purged by retention.", "tenant", "task_type"),
		retentionErrors: cv("retention_channel_errors_total", "Payloads a channel failed to archive (retried at the next sweep).", "tenant", "task_type"),
		outbox:          cv("outbox_deliveries_total", "Outbox delivery attempts to the external ledger by outcome (delivered, failed, dead).", "outcome"),
	}
}

// onEvent counts a delivery event; other kinds are ignored.
func (d *deliveryMetrics) onEvent(ev engine.Event) {
	switch ev.Kind {
	case engine.EvArchived:
		d.archived.WithLabelValues(ev.Tenant, ev.TaskType).Inc()
	case engine.EvPayloadPurged:
		d.purged.WithLabelValues(ev.Tenant, ev.TaskType).Inc()
	case engine.EvRetentionError:
		d.retentionErrors.WithLabelValues(ev.Tenant, ev.TaskType).Inc()
	case engine.EvOutboxDelivered:
		d.outbox.WithLabelValues("delivered").Inc()
	case engine.EvOutboxFailed:
		d.outbox.WithLabelValues("failed").Inc()
	case engine.EvOutboxDead:
		d.outbox.WithLabelValues("dead").Inc()
	}
}

var (
	descOutboxPending = prometheus.NewDesc("asyncgate_outbox_pending", "Outbox entries waiting for the external ledger.", nil, nil)
	descOutboxDead    = prometheus.NewDesc("asyncgate_outbox_dead", "Outbox entries the external ledger refused (gate outbox retry).", nil, nil)
	descOutboxLag     = prometheus.NewDesc("asyncgate_outbox_lag_seconds", "Age of the oldest pending outbox entry (0 when none).", nil, nil)
)

// outboxCollector reports the outbox at scrape time (operators only: the
// outbox is gate-wide).
type outboxCollector struct{ eng *engine.Engine }

func (outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descOutboxPending
	ch <- descOutboxDead
	ch <- descOutboxLag
}

func (o outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := o.eng.OutboxStatus(ctx, 1)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descOutboxPending, prometheus.GaugeValue, float64(st.Pending))
	ch <- prometheus.MustNewConstMetric(descOutboxDead, prometheus.GaugeValue, float64(st.Dead))
	ch <- prometheus.MustNewConstMetric(descOutboxLag, prometheus.GaugeValue, st.LagSeconds)
}
