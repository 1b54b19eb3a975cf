package push

import "github.com/prometheus/client_golang/prometheus"

var (
	connsDesc = prometheus.NewDesc("waitroom_push_connections",
		"Push connections (WebSocket and SSE) open on this instance.", nil, nil)
	publishedDesc = prometheus.NewDesc("waitroom_push_published_total",
		"Channel messages this instance published: one per admission batch, plus hints and gathered ended tickets.", nil, nil)
	publishErrorsDesc = prometheus.NewDesc("waitroom_push_publish_errors_total",
		"Channel messages this instance failed to publish.", nil, nil)
	receivedDesc = prometheus.NewDesc("waitroom_push_received_total",
		"Channel messages received from other instances.", nil, nil)
	deliveredDesc = prometheus.NewDesc("waitroom_push_delivered_total",
		"Admissions pushed to waiting connections, by path: local (this instance's batch), remote (another instance's, through Redis), resync (found by the periodic resync).",
		[]string{"path"}, nil)
	renewalsDesc = prometheus.NewDesc("waitroom_push_renewals_total",
		"Admitted sessions renewed for a visible page that answered a ping.", nil, nil)
	droppedDesc = prometheus.NewDesc("waitroom_push_dropped_total",
		"Connections closed by the hub, by reason: slow (no room in the queue for an admission or final status), write_timeout, ping (unanswered).",
		[]string{"reason"}, nil)
	stalledDesc = prometheus.NewDesc("waitroom_push_stalled_writes_total",
		"WebSocket writes that a client's socket did not take within 100 ms, finished off the shared writers.", nil, nil)
	refusedFullDesc = prometheus.NewDesc("waitroom_push_refused_full_total",
		"Push connects refused because this instance held its maximum of push connections (503 too_many_connections with Retry-After).", nil, nil)
	skippedDesc = prometheus.NewDesc("waitroom_push_skipped_total",
		"Position, stats and keep-alive messages not queued to a connection whose queue was half full.", nil, nil)
)

// collector exports a hub's counters as Prometheus metrics, read at scrape time.
type collector struct{ h *Hub }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{connsDesc, publishedDesc, publishErrorsDesc, receivedDesc, deliveredDesc, renewalsDesc, droppedDesc, skippedDesc, stalledDesc, refusedFullDesc} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	n := c.h.Counters()
	ch <- prometheus.MustNewConstMetric(connsDesc, prometheus.GaugeValue, float64(n.Conns))
	ch <- prometheus.MustNewConstMetric(publishedDesc, prometheus.CounterValue, float64(n.Published))
	ch <- prometheus.MustNewConstMetric(publishErrorsDesc, prometheus.CounterValue, float64(n.PublishErrors))
	ch <- prometheus.MustNewConstMetric(receivedDesc, prometheus.CounterValue, float64(n.Received))
	ch <- prometheus.MustNewConstMetric(deliveredDesc, prometheus.CounterValue, float64(n.DeliveredLocal), "local")
	ch <- prometheus.MustNewConstMetric(deliveredDesc, prometheus.CounterValue, float64(n.DeliveredRemote), "remote")
	ch <- prometheus.MustNewConstMetric(deliveredDesc, prometheus.CounterValue, float64(n.DeliveredResync), "resync")
	ch <- prometheus.MustNewConstMetric(renewalsDesc, prometheus.CounterValue, float64(n.Renewals))
	ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(n.DroppedSlow), "slow")
	ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(n.DroppedWrite), "write_timeout")
	ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(n.DroppedPing), "ping")
	ch <- prometheus.MustNewConstMetric(skippedDesc, prometheus.CounterValue, float64(n.Skipped))
	ch <- prometheus.MustNewConstMetric(stalledDesc, prometheus.CounterValue, float64(n.Stalled))
	ch <- prometheus.MustNewConstMetric(refusedFullDesc, prometheus.CounterValue, float64(n.RefusedFull))
}
