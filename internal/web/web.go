// Package web serves the pages people see: the waiting room of an event (GET /e/{event_id})
// and a small admin dashboard (GET /admin), plus the admin listing of events they use
// (GET /v1/events). The assets are embedded in the binary (no build step, no CDN); the pages
// talk only to the instance's own HTTP API and push endpoints.
//
// The waiting-room page joins the line (POST /v1/events/{id}/tickets), keeps the ticket id in
// localStorage under "waitroom:<event_id>" (so reloads and other tabs keep the place), follows
// the ticket live over WebSocket, falling back to Server-Sent Events and then to polling as
// poll_after_s says, reports the page's visibility to the hub, and on admission sends the
// person on to the event's redirect_url with ?waitroom_token=<admission token> appended (or
// shows the token when the event has no redirect_url).
package web

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpapi"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sqlstore"
)

//go:embed assets
var assetFS embed.FS

// asset is one embedded file, ready to serve.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

var assets = loadAssets()

func loadAssets() map[string]asset {
	m := map[string]asset{}
	err := fs.WalkDir(assetFS, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assetFS.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = "application/octet-stream"
		}
		m[strings.TrimPrefix(p, "assets/")] = asset{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic("web: embedded assets: " + err.Error()) // the files are compiled in; cannot happen
	}
	return m
}

// Route patterns served by the package.
const (
	RouteRoom   = "GET /e/{event_id}"
	RouteAdmin  = "GET /admin"
	RouteAssets = "GET /assets/{name}"
	RouteEvents = "GET /v1/events"
)

// assetMaxAge is how long browsers may cache the scripts and styles (s). Short, because the
// names are not content-hashed: a new release is picked up within five minutes.
const assetMaxAge = 300

// Mount registers the pages, their assets and GET /v1/events on a's API.
func Mount(a *app.App) {
	s := &site{api: a.API, registry: a.Registry}
	a.API.Handle(RouteRoom, http.HandlerFunc(s.room))
	a.API.Handle(RouteAdmin, http.HandlerFunc(s.admin))
	a.API.Handle(RouteAssets, http.HandlerFunc(s.asset))
	a.API.Handle(RouteEvents, http.HandlerFunc(s.listEvents))
}

type site struct {
	api      *httpapi.API
	registry *event.Registry
}

// pageHeaders sets the headers of an HTML page: a strict Content-Security-Policy (only this
// origin's scripts, styles and connections, WebSocket included), no framing, no sniffing.
func pageHeaders(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	host := r.Host
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self' ws://"+host+" wss://"+host+"; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

func (s *site) page(w http.ResponseWriter, r *http.Request, name string, code int) {
	a := assets[name]
	pageHeaders(w, r)
	w.Header().Set("Content-Type", a.contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		_, _ = w.Write(a.body)
	}
}

// room serves the waiting room of an event: 404 (a page saying so) when the event does not
// exist; the page reads everything else from the API.
func (s *site) room(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("event_id")
	if !queue.ValidEventID(id) {
		s.page(w, r, "notfound.html", http.StatusNotFound)
		return
	}
	if _, err := s.registry.Get(r.Context(), id); errors.Is(err, event.ErrNotFound) {
		s.page(w, r, "notfound.html", http.StatusNotFound)
		return
	}
	// Other errors (the database unreachable): serve the page; it retries the API itself.
	s.page(w, r, "room.html", http.StatusOK)
}

func (s *site) admin(w http.ResponseWriter, r *http.Request) {
	s.page(w, r, "admin.html", http.StatusOK)
}

// asset serves an embedded script, style sheet or image, with an ETag.
func (s *site) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	a, ok := assets[name]
	if !ok || strings.HasSuffix(name, ".html") {
		httpapi.WriteProblem(w, httpapi.NewProblem(404, "not_found", "no asset "+name))
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("Cache-Control", "public, max-age="+strconv.Itoa(assetMaxAge))
	h.Set("ETag", a.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	if inm := r.Header.Get("If-None-Match"); inm != "" && strings.Contains(inm, a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	_, _ = w.Write(a.body)
}

// eventSummary is one event in GET /v1/events: its configuration (live counters are in
// GET /v1/events/{event_id}).
type eventSummary struct {
	EventID     string     `json:"event_id"`
	Name        string     `json:"name"`
	MaxActive   int64      `json:"max_active"`
	AdmitRate   float64    `json:"admit_rate"`
	SessionTTLS int64      `json:"session_ttl_s"`
	ClaimTTLS   int64      `json:"claim_ttl_s"`
	OpensAt     *time.Time `json:"opens_at"`
	ClosesAt    *time.Time `json:"closes_at"`
	RedirectURL string     `json:"redirect_url,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// listEvents serves GET /v1/events (admin key required): {"events": [...]}, ordered by id,
// from the instance's registry (as of its last sync, at most a second old).
func (s *site) listEvents(w http.ResponseWriter, r *http.Request) {
	if !s.api.RequireAdmin(w, r) {
		return
	}
	evs := s.registry.List()
	slices.SortFunc(evs, func(a, b sqlstore.Event) int { return strings.Compare(a.ID, b.ID) })
	out := make([]eventSummary, len(evs))
	for i, e := range evs {
		cfg := event.StoreConfig(e)
		out[i] = eventSummary{
			EventID: e.ID, Name: e.Name, MaxActive: e.MaxActive, AdmitRate: e.AdmitRate,
			SessionTTLS: int64(cfg.SessionTTL / time.Second), ClaimTTLS: int64(cfg.ClaimTTL / time.Second),
			OpensAt: timePtr(e.OpensAt), ClosesAt: timePtr(e.ClosesAt), RedirectURL: e.RedirectURL,
			CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"events": out})
}
