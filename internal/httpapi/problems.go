package httpapi

import (
	"errors"
	"net/http"

	"github.com/waitroom/waitroom/internal/admin"
	"github.com/waitroom/waitroom/internal/adminkey"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/registry"
)

// eventProblems maps the errors of writing an event's configuration (event, registry) to
// problems; "{id}" is the event. StoreError tries it first, then the line's table
// (line.Problems: the line's rules, its store, an unknown event).
var eventProblems = httpjson.MustTable(httpjson.Table{
	{Err: registry.ErrInvalid, Status: 422, Code: "invalid_field"},
	{Err: event.ErrWouldDropSold, Status: 409, Code: "would_drop_sold", With: wouldDropSold},
	{Err: event.ErrVersionMismatch, Status: 412, Code: "precondition_failed", With: versionMismatch},
})

// adminProblems maps the errors of the named admin keys to problems; "{id}" is the key's name.
var adminProblems = httpjson.MustTable(httpjson.Table{
	{Err: adminkey.ErrRootKey, Status: 422, Code: "invalid_key_name", Detail: "the root key is the deployment's (WAITROOM_ADMIN_KEY): change it there"},
	{Err: adminkey.ErrInvalidName, Status: 422, Code: "invalid_key_name", Detail: "a key name matches " + adminkey.NamePattern + " and is not root"},
	{Err: admin.ErrKeyExists, Status: 409, Code: "admin_key_exists", Detail: "a key named {id} exists (or existed: names are not reused)"},
	{Err: admin.ErrKeyNotFound, Status: 404, Code: "admin_key_not_found", Detail: "no admin key named {id}"},
	{Err: adminkey.ErrInvalidRole, Status: 422, Code: "invalid_role", Detail: "role is health_reporter, read_only, operator or key_admin (or left out: operator)"},
	{Err: adminkey.ErrRoleAbove, Status: 403, Code: "insufficient_role", Detail: "a key admin mints keys of its own role or below"},
	{Err: adminkey.ErrInvalidEvents, Status: 422, Code: "invalid_field", Detail: "events is 1 to 100 distinct event ids (" + event.IDRule + "), or left out (or null) for every event"},
	{Err: adminkey.ErrScopeAbove, Status: 403, Code: "insufficient_scope", Detail: "a key of some events mints keys of those events only"},
	{Err: admin.ErrNotInLineage, Status: 403, Code: "insufficient_role", Detail: "a key admin revokes only the keys it minted (directly or through keys it minted) and itself; {id} is not one of them"},
	{Err: admin.ErrActorRevoked, Status: 401, Code: "unauthorized", Detail: "the key making this call was revoked while it ran"},
})

// wouldDropSold says what a refused configuration would drop: the units sold, the capacity
// asked for and the sold seats left out.
func wouldDropSold(p *httpjson.Problem, err error) {
	drop, ok := errors.AsType[*event.DropError](err)
	if !ok {
		return
	}
	if drop.Deleted {
		p.Detail = drop.Error() + ": DELETE with ?drop_sold=true to delete them too, or close the event instead"
		p.Extra = map[string]any{"sold": drop.Sold, "bookings": drop.Bookings}
		return
	}
	p.Detail = "this configuration would drop what was sold: " + drop.Error()
	seats := drop.Seats
	if seats == nil {
		seats = []string{}
	}
	p.Extra = map[string]any{"sold": drop.Sold, "capacity": drop.Capacity, "sold_seats_dropped": seats}
}

// versionMismatch gives a 412 the current version: as an entity tag (none when the event does
// not exist) and as current_version.
func versionMismatch(p *httpjson.Problem, err error) {
	var current int64
	if ve, ok := errors.AsType[*event.VersionError](err); ok {
		current = ve.Current
	}
	p.Detail = "the event does not exist"
	if current > 0 {
		p.Header = http.Header{}
		p.Header.Set("ETag", etag(current))
		p.Detail = "the event changed: it is at " + etag(current) + "; read it again and retry"
	}
	p.Extra = map[string]any{"current_version": current}
}

// WriteError writes the problem err maps to in t, one domain's table (the sale's, the
// coupons'), with subject in its detail; an error t does not know is answered as StoreError
// answers it.
func (a *API) WriteError(w http.ResponseWriter, err error, subject string, t httpjson.Table) {
	if p, ok := t.Problem(err, subject); ok {
		httpjson.WriteProblem(w, p)
		return
	}
	a.StoreError(w, err, subject)
}
