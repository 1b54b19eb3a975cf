package httpjson

import (
	"errors"
	"fmt"
	"strings"
)

// Table maps one domain's errors to problems: the first Rule whose Err the error matches
// (errors.Is; typed errors match their sentinel through their Is method) gives its status,
// code and detail. Each domain has one table, next to the handlers that write it (httpapi:
// the line and events, admin keys; saleapi: the sale, coupons).
type Table []Rule

// Rule is one row of a Table.
type Rule struct {
	Err    error
	Status int
	// Code is a stable code with a title in problemTitles (Check).
	Code string
	// Detail is the problem's detail, "{id}" in it replaced by the subject (the event, campaign
	// or key the request names); "" takes the error's own message.
	Detail string
	// With, when set, completes the problem from the error (extra members, headers,
	// Retry-After, a detail made of the error's fields).
	With func(p *Problem, err error)
}

// Problem returns the problem of the first rule err matches, with subject put in its detail,
// and whether one matched. An err that is (or wraps) a *Problem is that problem.
func (t Table) Problem(err error, subject string) (*Problem, bool) {
	if p := (*Problem)(nil); errors.As(err, &p) {
		return p, true
	}
	for _, r := range t {
		if r.Err == nil || !errors.Is(err, r.Err) {
			continue
		}
		detail := err.Error()
		if r.Detail != "" {
			detail = strings.ReplaceAll(r.Detail, "{id}", subject)
		}
		p := NewProblem(r.Status, r.Code, detail)
		if r.With != nil {
			r.With(p, err)
		}
		return p, true
	}
	return nil, false
}

// MustTable returns t, and panics (at package initialisation: the tables are
// package variables) when Check finds it cannot hold, as regexp.MustCompile does with a bad
// pattern: a broken table stops every test of its package, never a request.
func MustTable(t Table) Table {
	if err := t.Check(); err != nil {
		panic("httpjson: " + err.Error())
	}
	return t
}

// Check reports a table that cannot hold: a rule without an error, with a status that is not
// an error's or with a code that has no title, or a rule shadowed by an earlier one (its own
// sentinel would match the earlier rule).
func (t Table) Check() error {
	var errs []error
	for i, r := range t {
		switch {
		case r.Err == nil:
			errs = append(errs, fmt.Errorf("rule %d (%s): no error", i, r.Code))
		case problemTitles[r.Code] == "":
			errs = append(errs, fmt.Errorf("rule %d: code %q has no title", i, r.Code))
		case r.Status < 400 || r.Status > 599:
			errs = append(errs, fmt.Errorf("rule %d (%s): status %d is not an error", i, r.Code, r.Status))
		}
		for j := range i {
			if t[j].Err != nil && r.Err != nil && errors.Is(r.Err, t[j].Err) {
				errs = append(errs, fmt.Errorf("rule %d (%v) is shadowed by rule %d (%v)", i, r.Err, j, t[j].Err))
			}
		}
	}
	return errors.Join(errs...)
}
