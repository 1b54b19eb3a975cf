package app

import (
	"net/http"

	"github.com/waitroom/waitroom/internal/gateway"
)

// newGate builds the gate of Config.Gate, when set: the forward-auth check on the API and,
// with GateListener, the reverse proxy serving on it.
func (a *App) newGate(cfg Config) error {
	if cfg.Gate == nil {
		return nil
	}
	var err error
	if a.Gate, err = gateway.New(gateway.Config{
		File: *cfg.Gate, Line: a.Line, Admissions: a.Admissions, Clients: a.Clients, Origins: a.originPolicy, Waitroom: a.API, Logger: a.Log,
		Signals: a.Signals,
		Observe: a.Metrics.ObserveHTTP,
	}); err != nil {
		return err
	}
	for _, route := range gateway.RouteChecks {
		a.API.Handle(route, http.HandlerFunc(a.Gate.Check))
	}
	return nil
}
