package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/waitroom/waitroom/internal/autoadmit"
)

// autoGauges are admission mode auto's figures, by event (issue 23): the controller's state as
// stored, the same on every instance, so only the instance holding the "metrics" lease exports
// them (like the line's shared gauges).
type autoGauges struct {
	maxActive, admitRate, p95, gateDelay, errRatio, load, target, missing *prometheus.GaugeVec
}

func newAutoGauges() autoGauges {
	g := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"event"})
	}
	return autoGauges{
		maxActive: g("waitroom_auto_max_active", "Admission mode auto: the effective max_active the controller chose, by event."),
		admitRate: g("waitroom_auto_admit_rate", "Admission mode auto: the effective admit_rate (admissions/s) the controller chose, by event."),
		p95:       g("waitroom_auto_origin_p95_seconds", "Admission mode auto: the origin's p95 latency in the controller's last window, by event."),
		gateDelay: g("waitroom_auto_gate_delay_seconds", "Admission mode auto: the measuring gates' own scheduling delay in the controller's last window, taken off the measured p95, by event."),
		errRatio:  g("waitroom_auto_origin_error_ratio", "Admission mode auto: the share of the origin's answers that were errors in the controller's last window, by event."),
		load:      g("waitroom_auto_origin_requests_per_second", "Admission mode auto: requests/s the origin served (measured and reported) in the controller's last window, by event."),
		target:    g("waitroom_auto_target_p95_seconds", "Admission mode auto: the objective's p95 latency target, by event."),
		missing:   g("waitroom_auto_signal_missing", "Admission mode auto: 1 while the origin's signal is missing and the last safe limits are held, by event."),
	}
}

func (g autoGauges) all() []prometheus.Collector {
	return []prometheus.Collector{g.maxActive, g.admitRate, g.p95, g.gateDelay, g.errRatio, g.load, g.target, g.missing}
}

// ObserveAuto records an auto event's controller state (every instance calls it every step;
// the instance holding the "metrics" lease exports it). targetS is the objective's p95 (s).
func (m *Metrics) ObserveAuto(event string, s autoadmit.State, targetS float64) {
	g := m.auto
	if !m.Reporter() {
		m.ForgetAuto(event)
		return
	}
	g.maxActive.WithLabelValues(event).Set(float64(s.MaxActive))
	g.admitRate.WithLabelValues(event).Set(s.AdmitRate)
	g.p95.WithLabelValues(event).Set(s.P95MS / 1000)
	g.gateDelay.WithLabelValues(event).Set(s.GateDelayMS / 1000)
	g.errRatio.WithLabelValues(event).Set(s.ErrorRate)
	g.load.WithLabelValues(event).Set(s.Load)
	g.target.WithLabelValues(event).Set(targetS)
	missing := 0.0
	if s.Signal == autoadmit.SignalMissing {
		missing = 1
	}
	g.missing.WithLabelValues(event).Set(missing)
}

// ForgetAuto drops an event's auto gauges (not reporting, or the event left mode auto).
func (m *Metrics) ForgetAuto(event string) {
	for _, c := range m.auto.all() {
		c.(*prometheus.GaugeVec).DeleteLabelValues(event)
	}
}
