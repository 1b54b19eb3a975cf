// Package admission runs the admission processor: every instance steps every event's line
// a few times a second. The limits (max_active, admit_rate) are enforced inside the store's
// atomic admit step, so any number of instances together admit exactly as fast as one.
package admission

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/waitroom/waitroom/internal/loop"
	"github.com/waitroom/waitroom/internal/queue"
)

// Config configures an Admitter.
type Config struct {
	Store queue.Store // required
	// Events lists the ids of the events to step. Required.
	Events func() []string
	// Interval between steps of each event. Defaults to queue.AdmitStep, 100 ms: the admit_rate
	// bucket holds a tenth of a second, and a step later than that makes up its delay (up to
	// queue.AdmitLateMax), so a slower step would admit in bigger bursts.
	Interval time.Duration
	// MaxBatch caps one step's admissions (0 = no cap). Defaults to 0.
	MaxBatch int64
	// OnMissing is called for a listed event whose line the store does not have (it should
	// re-create it). Optional.
	OnMissing func(ctx context.Context, event string) error
	// OnStep is called after every step that admitted or ended sessions (push, metrics).
	OnStep func(event string, r queue.AdmitResult)
	Logger *slog.Logger // defaults to slog.Default()
}

// Admitter is the admission processor of one instance.
type Admitter struct {
	cfg  Config
	loop loop.Loop
}

// New returns an Admitter; Start runs it.
func New(cfg Config) (*Admitter, error) {
	if cfg.Store == nil || cfg.Events == nil {
		return nil, errors.New("admission: Config.Store and Config.Events are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = queue.AdmitStep
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Admitter{cfg: cfg}, nil
}

// Step runs one admission step of every event and returns the first error.
func (a *Admitter) Step(ctx context.Context) error {
	var first error
	for _, id := range a.cfg.Events() {
		r, err := a.cfg.Store.Admit(ctx, id, a.cfg.MaxBatch)
		if errors.Is(err, queue.ErrEventNotFound) && a.cfg.OnMissing != nil {
			// The store lost the line (a Redis restart): put it back, and nobody is stuck.
			err = a.cfg.OnMissing(ctx, id)
		}
		if err != nil {
			if !errors.Is(err, queue.ErrEventNotFound) && first == nil {
				first = err
			}
			continue
		}
		if a.cfg.OnStep != nil && (r.Admitted > 0 || r.Expired > 0) {
			a.cfg.OnStep(id, r)
		}
	}
	return first
}

// Start runs Step every Interval until Stop or ctx ends. It never fails.
func (a *Admitter) Start(ctx context.Context) error {
	a.loop.Start(ctx, "admission step", a.cfg.Interval, a.cfg.Logger, a.Step)
	return nil
}

// Stop ends the loop and waits for it (the step in flight is bounded by
// loop.DefaultStepTimeout, not by ctx). Safe before Start and more than once.
func (a *Admitter) Stop(context.Context) error {
	a.loop.Stop()
	return nil
}
