package event

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// The admission modes of an event (admission_mode; issue 23, docs/autoadmit.md).
const (
	// ModeFixed admits at the operator's max_active and admit_rate (the default).
	ModeFixed = "fixed"
	// ModeAuto admits at the limits the controller chooses within Auto's bounds from the
	// origin's measured health (package autoadmit).
	ModeAuto = "auto"
)

// Defaults and ranges of Auto (Validate).
const (
	DefaultTargetP95   = 500 * time.Millisecond
	DefaultErrorBudget = 0.01 // 1 % of the origin's answers may be errors (5xx, none)
	MinTargetP95       = time.Millisecond
	MaxTargetP95       = time.Minute
	MaxHealthURL       = 2000 // bytes
)

// Auto is the objective and the bounds of an event in admission mode "auto": the controller
// keeps the origin's p95 latency under TargetP95 and its error rate under ErrorBudget, choosing
// the effective max_active within [MinMaxActive, MaxMaxActive] and admit_rate within
// [MinAdmitRate, MaxAdmitRate]. The zero Auto is mode "fixed".
type Auto struct {
	// Enabled is admission_mode "auto".
	Enabled bool
	// TargetP95 is the origin's p95 latency to stay under (whole ms, 1 ms..60 s).
	// Defaults to DefaultTargetP95.
	TargetP95 time.Duration
	// ErrorBudget is the share of the origin's answers that may be errors (0..1; 5xx answers
	// and requests the origin did not answer). Defaults to DefaultErrorBudget; 0 is not
	// settable (there is always some error), use a small value.
	ErrorBudget float64
	// MinMaxActive and MaxMaxActive bound the effective max_active (1..MaxMaxActive).
	// Default to 1 and the event's max_active.
	MinMaxActive, MaxMaxActive int64
	// MinAdmitRate and MaxAdmitRate bound the effective admit_rate (admissions/s; 0 as the
	// upper bound = the controller's own pacing without a cap). MinAdmitRate defaults to 0.
	MinAdmitRate, MaxAdmitRate float64
	// PinMaxActive, when > 0, fixes the effective max_active at that value (within the
	// bounds); the controller still measures and reports.
	PinMaxActive int64
	// Hold keeps the effective limits where they are: the controller measures and reports
	// but changes nothing (the operator's pause of the controller).
	Hold bool
	// Origin names the origin the event's pages are served by (default: the event id); the
	// controller of an event counts the signals of every event naming the same origin.
	Origin string
	// HealthURL, when set, is polled every second by the controller's instance; its answer
	// is a signal like an origin's own report (docs/autoadmit.md).
	HealthURL string
}

// WithDefaults returns a copy with zero fields set to their defaults for an event whose fixed
// max_active is maxActive.
func (a Auto) WithDefaults(id string, maxActive int64) Auto {
	if a.TargetP95 == 0 {
		a.TargetP95 = DefaultTargetP95
	}
	a.TargetP95 = a.TargetP95.Truncate(time.Millisecond)
	if a.ErrorBudget == 0 {
		a.ErrorBudget = DefaultErrorBudget
	}
	if a.MinMaxActive == 0 {
		a.MinMaxActive = 1
	}
	if a.MaxMaxActive == 0 {
		a.MaxMaxActive = maxActive
	}
	if a.Origin == "" {
		a.Origin = id
	}
	return a
}

// Validate returns a descriptive error naming the JSON field (auto.*).
func (a Auto) Validate() error {
	switch {
	case a.TargetP95 < MinTargetP95 || a.TargetP95 > MaxTargetP95:
		return errors.New("auto.target_p95_ms must be between 1 and 60000")
	case math.IsNaN(a.ErrorBudget) || a.ErrorBudget <= 0 || a.ErrorBudget > 1:
		return errors.New("auto.error_budget must be above 0 and at most 1")
	case a.MinMaxActive < 1 || a.MinMaxActive > MaxMaxActive:
		return fmt.Errorf("auto.min_max_active must be between 1 and %d", MaxMaxActive)
	case a.MaxMaxActive < a.MinMaxActive || a.MaxMaxActive > MaxMaxActive:
		return fmt.Errorf("auto.max_max_active must be between auto.min_max_active and %d", MaxMaxActive)
	case math.IsNaN(a.MinAdmitRate) || a.MinAdmitRate < 0 || a.MinAdmitRate > MaxAdmitRate:
		return fmt.Errorf("auto.min_admit_rate must be between 0 and %d", MaxAdmitRate)
	case math.IsNaN(a.MaxAdmitRate) || a.MaxAdmitRate < 0 || a.MaxAdmitRate > MaxAdmitRate ||
		(a.MaxAdmitRate > 0 && a.MaxAdmitRate < a.MinAdmitRate):
		return fmt.Errorf("auto.max_admit_rate must be 0 (no cap) or between auto.min_admit_rate and %d", MaxAdmitRate)
	case a.PinMaxActive < 0 || (a.PinMaxActive > 0 && (a.PinMaxActive < a.MinMaxActive || a.PinMaxActive > a.MaxMaxActive)):
		return errors.New("auto.pin_max_active must be 0 (none) or between auto.min_max_active and auto.max_max_active")
	case !ValidID(a.Origin):
		return fmt.Errorf("auto.origin must match %s", IDRule)
	case len(a.HealthURL) > MaxHealthURL:
		return fmt.Errorf("auto.health_url must be at most %d bytes", MaxHealthURL)
	case a.HealthURL != "" && (!ValidText(a.HealthURL) || !httpURL(a.HealthURL)):
		return errors.New("auto.health_url must be an absolute http or https URL")
	}
	return nil
}

// Mode is the event's admission_mode: ModeAuto or ModeFixed.
func (e Event) Mode() string {
	if e.Auto.Enabled {
		return ModeAuto
	}
	return ModeFixed
}

// StartRate is the effective admit_rate of a line in mode auto before its controller chose
// one: the pacing of MinMaxActive (PaceRate).
func (a Auto) StartRate() float64 { return a.PaceRate(a.MinMaxActive) }

// PaceRate is the effective admit_rate that goes with an effective max_active of limit: two
// limits' worth a second (a full house turns over within half a second however short its
// sessions are, and a raised limit fills in a fraction of a second, not at once), within
// [MinAdmitRate, MaxAdmitRate] (MaxAdmitRate 0: no cap).
func (a Auto) PaceRate(limit int64) float64 {
	r := max(2*float64(limit), a.MinAdmitRate)
	if a.MaxAdmitRate > 0 {
		r = min(r, a.MaxAdmitRate)
	}
	return min(r, MaxAdmitRate)
}
