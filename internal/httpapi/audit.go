package httpapi

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/waitroom/waitroom/internal/admin"
	"github.com/waitroom/waitroom/internal/adminkey"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpjson"
)

// AuditTrail keeps the audit trail of admin actions (package sqlstore's DB implements it).
type AuditTrail interface {
	// AddAudit records e and returns it with its id and time. Errors: the database's.
	AddAudit(ctx context.Context, e admin.AuditEntry) (admin.AuditEntry, error)
	// Audit returns up to limit entries, newest first, with ids below beforeID (0: from the
	// newest), of one event ("" = all). Errors: the database's.
	Audit(ctx context.Context, eventID string, beforeID int64, limit int) ([]admin.AuditEntry, error)
}

// Audit records an admin action of request r: who did it (the actor its authentication gave,
// never a second authentication), from which address (the client by the trusted-proxy rule of
// package clientaddr, not the connection's peer, which behind a load balancer is the balancer),
// what (action, e.g. "event.update"), on which event ("" for none), and the state before and
// after (any JSON-encodable value, nil for none). The record is written on a context of its
// own (the action is done: the client going away must not lose its record); a failure is
// logged and counted, never the client's problem. A zero who is a bug (only Authenticate makes
// an Actor): Audit panics rather than record an action without its actor.
func (a *API) Audit(r *http.Request, who Actor, action, eventID string, before, after any) {
	if who.key.Name == "" {
		panic("httpapi: an audited action without its actor: " + action)
	}
	e := admin.AuditEntry{Admin: who.key.Name, Address: a.clientAddress(r), Action: action, EventID: eventID,
		Before: jsonOrEmpty(before), After: jsonOrEmpty(after)}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	if _, err := a.cfg.AuditTrail.AddAudit(ctx, e); err != nil {
		a.cfg.Metrics.StoreErrors.Inc()
		a.cfg.Logger.Error("audit record lost", "action", action, "event", eventID, "admin", who.key.Name, "err", err)
	}
}

// clientAddress is the request's client address as package clientaddr resolves it (the
// trusted proxies' forwarding header, else the peer); the peer's host when unreadable.
func (a *API) clientAddress(r *http.Request) string {
	if c := a.cfg.Clients.Addr(r); c.IsValid() {
		return c.String()
	}
	return clientHost(r)
}

// clientHost is the request's peer address without the port.
func clientHost(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

func jsonOrEmpty(v any) string {
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// auditView is an event's configuration as the audit trail records it (the PUT shape, without
// the challenge's secret).
func auditView(e event.Event) any {
	b := bodyOf(e)
	b.Challenge = publicChallengeView(e.Challenge)
	return b
}

// auditJSON is one entry of GET /v1/audit.
type auditJSON struct {
	ID      int64           `json:"id"`
	At      time.Time       `json:"at"`
	Admin   string          `json:"admin"`
	Address string          `json:"address"`
	Action  string          `json:"action"`
	EventID string          `json:"event_id,omitempty"`
	Before  json.RawMessage `json:"before,omitempty"`
	After   json.RawMessage `json:"after,omitempty"`
}

// auditTrail serves GET /v1/audit (admin): ?event_id= filters, ?limit= (1-500, default 100),
// ?before= (an id) pages back: {"entries": [...newest first], "next": id or null}.
func (a *API) auditTrail(w http.ResponseWriter, r *http.Request, _ Actor) {
	q, ok := httpjson.Query(w, r, "limit", "before", "event_id")
	if !ok {
		return
	}
	limit, before := 100, int64(0)
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			httpjson.WriteProblem(w, httpjson.NewProblem(400, "invalid_query", "limit must be between 1 and 500"))
			return
		}
		limit = n
	}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			httpjson.WriteProblem(w, httpjson.NewProblem(400, "invalid_query", "before must be an entry id"))
			return
		}
		before = n
	}
	eventID := q.Get("event_id")
	if eventID != "" && !event.ValidID(eventID) {
		httpjson.WriteProblem(w, httpjson.NewProblem(400, "invalid_event_id", "event ids match "+event.IDRule))
		return
	}
	entries, err := a.cfg.AuditTrail.Audit(r.Context(), eventID, before, limit)
	if err != nil {
		a.StoreError(w, err, eventID)
		return
	}
	out := make([]auditJSON, len(entries))
	for i, e := range entries {
		out[i] = auditJSON{ID: e.ID, At: e.At, Admin: e.Admin, Address: e.Address, Action: e.Action, EventID: e.EventID}
		if e.Before != "" {
			out[i].Before = json.RawMessage(e.Before)
		}
		if e.After != "" {
			out[i].After = json.RawMessage(e.After)
		}
	}
	var next any
	if len(entries) == limit {
		next = entries[len(entries)-1].ID
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"entries": out, "next": next})
}

// keyBody is the JSON of POST /v1/admin/keys.
type keyBody struct {
	Name string `json:"name"`
	// Role is health_reporter, read_only, operator or key_admin; left out (or null):
	// admin.DefaultRole. Given, it is one of them ("" is not leaving it out).
	Role *admin.Role `json:"role"`
	// Events are the only events the key may act on (admin.Scope); left out or null: every
	// event.
	Events *[]string `json:"events"`
}

// createKey serves POST /v1/admin/keys (key_admin): {"name": "alice", "role": "operator",
// "events": ["ga"]} mints a named admin key for who and answers its secret once (201); only its
// hash is kept. A key admin mints roles up to its own (403 insufficient_role above); events
// scope the key to those events (admin.Scope; 422 invalid_field for an empty list, more than
// admin.MaxEvents, a repeat or no event id).
func (a *API) createKey(w http.ResponseWriter, r *http.Request, who Actor) {
	var b keyBody
	// 16 KiB: a name, a role and up to admin.MaxEvents event ids of 64 bytes (6.7 KB quoted).
	if !httpjson.ReadJSON(w, r, 16<<10, &b, false) {
		return
	}
	role := admin.DefaultRole
	if b.Role != nil {
		role = *b.Role
	}
	var events admin.Scope // nil: every event
	if b.Events != nil {
		events = admin.Scope(*b.Events) // [] decodes to an empty list, not nil: refused by Create
	}
	secret, err := a.cfg.Keys.Create(r.Context(), who.key, b.Name, role, events)
	if err != nil {
		a.WriteError(w, err, b.Name, adminProblems)
		return
	}
	if events != nil {
		events = slices.Sorted(slices.Values(events)) // as kept
	}
	after := map[string]any{"name": b.Name, "key_hash": adminkey.Hash(secret), "role": string(role)}
	if events != nil {
		after["events"] = events
	}
	a.Audit(r, who, "admin_key.create", "", nil, after)
	w.Header().Set("Location", "/v1/admin/keys/"+b.Name)
	httpjson.WriteJSON(w, http.StatusCreated, map[string]any{"name": b.Name, "key": secret, "role": string(role), "events": events})
}

// keyJSON is a named key as GET /v1/admin/keys lists it.
type keyJSON struct {
	Name      string     `json:"name"`
	Role      admin.Role `json:"role"`
	CreatedBy *string    `json:"created_by"` // null: minted before roles, by a key the audit trail does not name
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
	Events    []string   `json:"events"` // null: every event
}

// listKeys serves GET /v1/admin/keys (key_admin): the named keys, never their secrets.
func (a *API) listKeys(w http.ResponseWriter, r *http.Request, _ Actor) {
	keys, err := a.cfg.Keys.List(r.Context())
	if err != nil {
		a.StoreError(w, err, "")
		return
	}
	out := make([]keyJSON, len(keys))
	for i, k := range keys {
		out[i] = keyJSON{Name: k.Name, Role: k.Role, CreatedAt: k.CreatedAt, RevokedAt: timePtr(k.RevokedAt), Events: k.Events}
		if k.CreatedBy != "" {
			out[i].CreatedBy = &k.CreatedBy
		}
	}
	httpjson.WriteJSON(w, http.StatusOK, map[string]any{"keys": out})
}

// revokeKey serves DELETE /v1/admin/keys/{name} (key_admin): the key and every key it minted
// (directly or through keys it minted) are revoked in one transaction, which has committed —
// so they fail on every instance — when this answers 200 {"revoked": [names revoked now],
// "untraced": [live keys whose minter is unknown, which no revocation reaches but by name]}.
// A key admin revokes only keys of its own lineage (403 insufficient_role otherwise).
func (a *API) revokeKey(w http.ResponseWriter, r *http.Request, who Actor) {
	name := r.PathValue("name")
	rv, err := a.cfg.Keys.Revoke(r.Context(), who.key, name)
	if err != nil {
		a.WriteError(w, err, name, adminProblems)
		return
	}
	out := map[string][]string{"revoked": rv.Revoked, "untraced": rv.Untraced}
	a.Audit(r, who, "admin_key.revoke", "", map[string]string{"name": name}, out)
	httpjson.WriteJSON(w, http.StatusOK, out)
}
