package app

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/waitroom/waitroom/internal/autoadmit"
)

// newAuto assembles admission mode auto (package autoadmit): this instance's signals (the gate
// measures into them, the API's health reports add to them), flushed to the backend, and the
// controllers of the auto events whose lease this instance holds. Every instance gives the
// stored state to the registry (the effective limits every reader of an event sees) and to the
// metrics.
func (a *App) newAuto(cfg Config) error {
	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand never fails (Go 1.24+)
	var err error
	a.Auto, err = autoadmit.NewController(autoadmit.Config{
		Store: a.Backend.Auto, Leases: a.Backend.Leases, Line: a.Backend.Line, Signals: a.Signals,
		Events: a.Registry.List, History: a.Backend.History, Instance: hex.EncodeToString(id[:]),
		Interval: cfg.AutoInterval, Logger: a.Log, HealthURLs: cfg.HealthURLs,
		OnState: func(ev string, s autoadmit.State) {
			a.Registry.SetEffective(ev, s.MaxActive, s.AdmitRate)
			if e, ok := a.Registry.Cached(ev); ok {
				a.Metrics.ObserveAuto(ev, s, e.Auto.TargetP95.Seconds())
			}
			if n := len(s.Decisions); n > 0 && s.Decisions[n-1].At == s.At {
				dir := "up"
				if n > 1 && s.Decisions[n-2].MaxActive > s.MaxActive {
					dir = "down"
				}
				if s.Holder == a.Auto.Instance() {
					a.Metrics.AutoChanges.WithLabelValues(ev, dir).Inc()
				}
			}
		},
	})
	return err
}
