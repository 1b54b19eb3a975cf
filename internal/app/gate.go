package app

import (
	"net/http"

	"github.com/waitroom/waitroom/internal/gateway"
	"github.com/waitroom/waitroom/internal/queue"
)

// newGate builds the gate of Config.Gate, when set: the forward-auth check on the API and,
// with GateListener, the reverse proxy serving on it.
func (a *App) newGate(cfg Config) error {
	if cfg.Gate == nil {
		return nil
	}
	var err error
	if a.Gate, err = gateway.New(gateway.Config{
		File: *cfg.Gate, Line: a.Backend.Line, Tickets: a.Tickets, Admissions: a.Admissions, Waitroom: a.API,
		EnsureLine: a.Registry.Restore, Event: a.Registry.Cached, Listener: cfg.GateListener,
		ShutdownTimeout: cfg.ShutdownGrace, Logger: a.Log,
		OnJoin: func(id string, t queue.Ticket) {
			result := "queued"
			if t.Status == queue.StatusAdmitted {
				result = "admitted"
				a.Metrics.Admissions.WithLabelValues(id, "join").Inc()
			}
			a.Metrics.Joins.WithLabelValues(id, result).Inc()
		},
	}); err != nil {
		return err
	}
	a.API.Handle(gateway.RouteCheck, http.HandlerFunc(a.Gate.Check))
	a.add("gate", a.Gate.Start, a.Gate.Stop)
	return nil
}

// gateServed is the gate server's end (a nil channel without one).
func (a *App) gateServed() <-chan error {
	if a.Gate == nil {
		return nil
	}
	return a.Gate.Served()
}
