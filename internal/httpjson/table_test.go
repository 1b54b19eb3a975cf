package httpjson

import (
	"errors"
	"fmt"
	"testing"
)

var (
	errGone   = errors.New("gone")
	errLocked = errors.New("locked")
)

// lockedError carries a field a rule's With reads; it matches errLocked.
type lockedError struct{ by string }

func (e *lockedError) Error() string        { return "locked by " + e.by }
func (e *lockedError) Is(target error) bool { return target == errLocked }

var testTable = Table{
	{Err: errGone, Status: 410, Code: "event_closed", Detail: "event {id} is gone"},
	{Err: errLocked, Status: 409, Code: "hold_conflict", With: func(p *Problem, err error) {
		if le, ok := errors.AsType[*lockedError](err); ok {
			p.Extra = map[string]any{"by": le.by}
		}
	}},
}

func TestTableProblem(t *testing.T) {
	p, ok := testTable.Problem(fmt.Errorf("reading: %w", errGone), "concert")
	if !ok || p.Status != 410 || p.Code != "event_closed" || p.Detail != "event concert is gone" || p.Title != "Event closed" {
		t.Fatalf("a wrapped sentinel: %+v, %v", p, ok)
	}
	p, ok = testTable.Problem(&lockedError{by: "ann"}, "concert")
	if !ok || p.Status != 409 || p.Detail != "locked by ann" || p.Extra["by"] != "ann" {
		t.Fatalf("a typed error, the detail its message: %+v, %v", p, ok)
	}
	own := NewProblem(429, "rate_limited", "slow down")
	if p, ok = testTable.Problem(fmt.Errorf("join: %w", own), "concert"); !ok || p != own {
		t.Fatalf("a problem is itself: %+v, %v", p, ok)
	}
	if p, ok = testTable.Problem(errors.New("connection refused"), "concert"); ok || p != nil {
		t.Fatalf("an unknown error: %+v, %v", p, ok)
	}
}

func TestTableCheck(t *testing.T) {
	if err := testTable.Check(); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]Table{
		"shadowed":  {{Err: errLocked, Status: 409, Code: "hold_conflict"}, {Err: errLocked, Status: 410, Code: "event_closed"}},
		"no title":  {{Err: errGone, Status: 410, Code: "no_such_code"}},
		"no error":  {{Status: 410, Code: "event_closed"}},
		"no status": {{Err: errGone, Code: "event_closed"}},
	} {
		if bad.Check() == nil {
			t.Errorf("%s: Check found nothing", name)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: MustTable took it", name)
				}
			}()
			MustTable(bad)
		}()
	}
}
