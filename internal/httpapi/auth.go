package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/admin"
	"github.com/waitroom/waitroom/internal/adminkey"
	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/store"
)

// Actor is who made an admin request: the admin key it carried ("root" for the deployment's
// own key, WAITROOM_ADMIN_KEY) and the key's role. Only Authenticate makes one, so code that
// holds a non-zero Actor has authenticated its request; the actor then travels with the request
// to the audit trail (Audit) and to the key management (who mints, who revokes), which never
// authenticate again (issue 20, item 7: the audit named the admin by a second authentication
// after the action, which a key whose address had meanwhile used up its failed authentications
// lost, and the action was recorded as admin "").
type Actor struct {
	key adminkey.Actor
}

// Name is the admin key's name ("root" for the deployment's own key).
func (a Actor) Name() string { return a.key.Name }

// Role is the admin key's role (admin.RoleRoot for the deployment's own key).
func (a Actor) Role() admin.Role { return a.key.Role }

// AdminHandler serves an admin route; who is the request's actor, authenticated once before
// the handler runs.
type AdminHandler func(w http.ResponseWriter, r *http.Request, who Actor)

// HandleAdmin registers an admin route on the API's mux that needs role need or a higher one
// (the table of docs/api.md): each request is authenticated once (Authenticate) before h runs,
// and answered Authenticate's problem when it does not authenticate with such a key. Call
// before serving.
func (a *API) HandleAdmin(pattern string, need admin.Role, h AdminHandler) {
	a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		who, p := a.Authenticate(r, need)
		if p != nil {
			httpjson.WriteProblem(w, p)
			return
		}
		h(w, r, who)
	})
}

// Authenticate checks the admin key the request carries as a bearer token (the root key or a
// live named one) and returns its actor, or the problem to answer:
//
//   - 401 unauthorized (with WWW-Authenticate) without a bearer token, or with one that is no
//     live admin key;
//   - 403 insufficient_role for a key whose role is below need;
//   - 403 insufficient_scope for a key scoped to some events (admin.Scope) on a call that
//     names another event or none: the event is r's {event_id} path value, so r must have
//     been routed (an unrouted request names none, and fails closed);
//   - 429 rate_limited to a client over Config.AdminFailures failed authentications per
//     Config.AdminFailureWindow (on all instances together), whatever it sends: a guess that
//     happened to be right must not pass;
//   - 503 store_unavailable when the database does not answer the check of a named key (the
//     root key needs none): the call fails closed and counts no failure.
//
// Every bearer that is not an admin key counts as a failed authentication of the client,
// whatever its shape (issue 20, item 11: bearers holding a "." were taken for JWTs and never
// counted, so 2,000 guesses met no lockout). A route that also takes another bearer (an
// admission token, an identity JWT) checks that first and calls Authenticate only when it
// fails. Call it once per request: it counts what it sees.
func (a *API) Authenticate(r *http.Request, need admin.Role) (Actor, *httpjson.Problem) {
	tok, ok := httpjson.Bearer(r)
	if !ok {
		return Actor{}, unauthorized("this call needs one Authorization: Bearer <admin key> header")
	}
	client := a.ClientKey(r)
	refusal := "admin:" + client
	if left, refused := a.refusals.Refused(refusal); refused {
		return Actor{}, adminThrottled(left)
	}
	key, err := a.cfg.Keys.Check(r.Context(), tok)
	valid := err == nil
	if err != nil && !errors.Is(err, adminkey.ErrNoKey) {
		a.cfg.Logger.Warn("checking an admin key: the database did not answer", "err", err)
		return Actor{}, httpjson.NewProblem(http.StatusServiceUnavailable, "store_unavailable", "the admin key could not be checked: the database did not answer")
	}
	// A right key reads the client's count too (one Counters call per admin call, the same as
	// a failure's): a client at the limit is refused whatever it sends.
	var add int64
	if !valid {
		add = 1
	}
	n, left := a.adminFailures(r.Context(), client, add)
	limit := a.cfg.AdminFailures
	switch {
	case n > limit || (valid && n >= limit):
		a.refusals.Refuse(refusal, left)
		return Actor{}, adminThrottled(left)
	case !valid && n == limit: // this failure was the last allowed
		a.refusals.Refuse(refusal, left)
	}
	if !valid {
		return Actor{}, unauthorized("the bearer token is not a live admin key")
	}
	if !key.Role.Allows(need) {
		return Actor{}, insufficientRole(key, need)
	}
	if id := r.PathValue("event_id"); !key.Events.Allows(id) {
		return Actor{}, insufficientScope(key, id)
	}
	return Actor{key: key}, nil
}

// insufficientScope is the 403 of a key scoped to some events on a call on another event
// (id), or on none ("").
func insufficientScope(key adminkey.Actor, id string) *httpjson.Problem {
	what := "a call that names no event"
	if id != "" {
		what = "event " + id
	}
	return httpjson.NewProblem(http.StatusForbidden, "insufficient_scope",
		key.Name+" acts on its events only ("+strings.Join(key.Events, ", ")+"), not on "+what+" (docs/api.md, roles)")
}

// insufficientRole is the 403 of a key whose role is below the one a call needs.
func insufficientRole(key adminkey.Actor, need admin.Role) *httpjson.Problem {
	return httpjson.NewProblem(http.StatusForbidden, "insufficient_role",
		"this call needs a key of role "+string(need)+" or above; "+key.Name+" is "+string(key.Role)+" (docs/api.md, roles)")
}

// unauthorized is the 401 of an admin call, with its challenge.
func unauthorized(detail string) *httpjson.Problem {
	p := httpjson.NewProblem(http.StatusUnauthorized, "unauthorized", detail)
	p.Header = http.Header{}
	p.Header.Set("WWW-Authenticate", `Bearer realm="waitroom admin"`)
	return p
}

func adminThrottled(left time.Duration) *httpjson.Problem {
	return httpjson.RateLimited(left, "too many failed admin authentications from this address")
}

// adminFailures adds add (0 or 1) to client's failed admin authentications in the current
// window and returns the count and the time left in the window: Config.Counters' count, or,
// when there are none or they do not answer, this instance's own.
func (a *API) adminFailures(ctx context.Context, client string, add int64) (int64, time.Duration) {
	if a.cfg.Counters != nil {
		n, left, err := a.cfg.Counters.Count(ctx, store.CountKey{Scope: "admin-auth", Name: client}, add, a.cfg.AdminFailureWindow)
		if err == nil {
			return n, left
		}
		a.cfg.Logger.Warn("counting failed admin authentications in the store; this instance counts alone meanwhile",
			"client", client, "err", err)
	}
	return a.adminFails.Count(client, add, a.cfg.AdminFailureWindow)
}

// readsPrivate reports whether r, on a route anyone may call, carries an admin key of at
// least the read-only role, so that the answer may include what only operators see. A
// request without Authorization is not counted as a refused key.
func (a *API) readsPrivate(r *http.Request) bool {
	if _, ok := httpjson.Bearer(r); !ok {
		return false
	}
	_, p := a.Authenticate(r, admin.RoleReadOnly)
	return p == nil
}
