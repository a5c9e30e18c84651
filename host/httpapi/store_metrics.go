package httpapi

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncgate/asyncgate/host/store"
)

// The store's writers, read at scrape time. They are gate-wide, so only the
// gate's operators see them (handler). Their busy time is the saturation
// signal: rate(asyncgate_store_writer_busy_seconds_total[1m]) divided by
// asyncgate_store_writers near 1 means every write waits on the writers,
// and more producers or workers only lengthen the queue in front of them.
var (
	descStoreWriters = prometheus.NewDesc("asyncgate_store_writers",
		"Writers that run the store's group-commit batches (each a database connection).", nil, nil)
	descStoreBatches = prometheus.NewDesc("asyncgate_store_batches_total",
		"Batches (group commits) the store's writers ran.", nil, nil)
	descStoreUpdates = prometheus.NewDesc("asyncgate_store_batched_updates_total",
		"Updates the writers' batches carried; divided by asyncgate_store_batches_total, the batch size.", nil, nil)
	descStoreBusy = prometheus.NewDesc("asyncgate_store_writer_busy_seconds_total",
		"Time the writers spent running batches, summed over writers; its rate divided by asyncgate_store_writers is how saturated they are.", nil, nil)
	descEnqueuesHeld = prometheus.NewDesc("asyncgate_store_enqueues_held_total",
		"Enqueues the enqueue budget held back under overload (a backlog while completions arrive), so completions are served first.", nil, nil)
	descEnqueueHold = prometheus.NewDesc("asyncgate_store_enqueue_hold_seconds_total",
		"Time held enqueues waited, summed; divided by asyncgate_store_enqueues_held_total, the mean hold.", nil, nil)
	descEnqueueHoldsExpired = prometheus.NewDesc("asyncgate_store_enqueue_holds_expired_total",
		"Held enqueues that waited the whole bound (500 ms) and were then queued anyway.", nil, nil)
	descEnqueuesWaiting = prometheus.NewDesc("asyncgate_store_enqueues_waiting",
		"Enqueues the enqueue budget holds now.", nil, nil)
)

// writerCollector reports a store's WriterStats.
type writerCollector struct{ st store.WriterStatser }

func (writerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descStoreWriters
	ch <- descStoreBatches
	ch <- descStoreUpdates
	ch <- descStoreBusy
	ch <- descEnqueuesHeld
	ch <- descEnqueueHold
	ch <- descEnqueueHoldsExpired
	ch <- descEnqueuesWaiting
}

func (w writerCollector) Collect(ch chan<- prometheus.Metric) {
	s := w.st.WriterStats()
	ch <- prometheus.MustNewConstMetric(descStoreWriters, prometheus.GaugeValue, float64(s.Writers))
	ch <- prometheus.MustNewConstMetric(descStoreBatches, prometheus.CounterValue, float64(s.Batches))
	ch <- prometheus.MustNewConstMetric(descStoreUpdates, prometheus.CounterValue, float64(s.Updates))
	ch <- prometheus.MustNewConstMetric(descStoreBusy, prometheus.CounterValue, s.Busy.Seconds())
	ch <- prometheus.MustNewConstMetric(descEnqueuesHeld, prometheus.CounterValue, float64(s.EnqueuesHeld))
	ch <- prometheus.MustNewConstMetric(descEnqueueHold, prometheus.CounterValue, s.EnqueueHold.Seconds())
	ch <- prometheus.MustNewConstMetric(descEnqueueHoldsExpired, prometheus.CounterValue, float64(s.EnqueueHoldsExpired))
	ch <- prometheus.MustNewConstMetric(descEnqueuesWaiting, prometheus.GaugeValue, float64(s.EnqueuesWaiting))
}
