package gate

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/waitroom/waitroom/internal/clientaddr"
	"github.com/waitroom/waitroom/internal/pathrule"
)

// Handler returns next guarded by the gate. For each request it takes the admission token from,
// in order:
//
//  1. the ?waitroom_token= query parameter (the hand-off from the waiting-room page): when it
//     verifies, the gate sets the cookie (HttpOnly, SameSite=Lax, Secure on HTTPS, Max-Age up
//     to the token's exp) and, for GET and HEAD, answers 303 to the same URL without the
//     parameter, so the token does not linger in the address bar, history or Referer. A
//     cookie that holds a live admission of another ticket is kept (a link from any site can
//     carry a token of its choice; the visitor's own admission is not replaced by it), one of
//     the same ticket is renewed;
//  2. the cookie ([Config.CookieName]);
//  3. an "Authorization: Bearer <token>" header ([BearerToken]: one such field).
//
// The first token that verifies (see [Gate.Verify]) admits the request: next runs with the
// [Admission] in the context ([FromContext]). Without one, a request whose Accept includes
// text/html gets 303 to the waiting-room page {WaitingRoomURL}/e/{EventID}; any other gets
// 401 application/problem+json (RFC 9457) with code "admission_required", the reason in
// detail, "waiting_room_url", and a WWW-Authenticate Bearer challenge (RFC 6750 §3). A stale
// cookie is deleted. While no key set has ever been fetched, a request carrying a token gets
// 503 "admission_unavailable" with Retry-After instead (the visitor may well be admitted).
func (g *Gate) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.serve(w, r, next)
	})
}

// Site is [Gate.Handler] for the requests of a whole site that fall under [Config.Paths],
// which it decides with the waiting room's path rule (package internal/pathrule), as the
// waiting room's own gate and forward-auth check do: wrap the site's whole handler, not the
// protected routes one by one. A router decides by its own reading of the path, which is not
// every origin's: "/checkout/", "/%63heckout/" or "/checkout%2F" reach a catch-all file
// server or a framework's router as the checkout while a mux entry for "/checkout" never sees
// them. Site answers a path that servers read in different ways 400 application/problem+json
// "invalid_path" whatever it would match (fail closed); a request under BypassPaths, or under no
// Paths, goes to next as it is, but for a hand-off's token (see handoff).
func (g *Gate) Site(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, bad := pathrule.Read(r.URL.Path, r.URL.RawPath)
		if bad == "" {
			bad = pathrule.ReadQuery(r.URL.RawQuery)
		}
		if bad != "" {
			writeProblem(w, http.StatusBadRequest, "invalid_path", "Invalid path", pathrule.Refusal(bad), nil)
			return
		}
		protected := true
		for _, b := range g.cfg.BypassPaths {
			if p.BypassedBy(b) {
				protected = false
				break
			}
		}
		if protected {
			i, _ := pathrule.Match(p, r.URL.RawQuery, g.paths, !g.cfg.PathsIgnoreQuery)
			protected = i >= 0
		}
		if !protected {
			g.handoff(w, r, next)
			return
		}
		g.serve(w, r, next)
	})
}

// handoff serves a request Site lets through: a hand-off (?waitroom_token=) on any page of the
// site (the event's redirect_url need not be under Paths) is taken as on a protected one, its
// token kept in the cookie (when it verifies and the cookie holds no live admission of another
// ticket) and, for GET and HEAD, taken out of the address by a 303; anything else goes to next
// as it came.
func (g *Gate) handoff(w http.ResponseWriter, r *http.Request, next http.Handler) {
	tok, ok := queryToken(r)
	if !ok {
		next.ServeHTTP(w, r)
		return
	}
	verify := func(tok string) (Admission, error) { return g.VerifyFrom(r.Context(), tok, g.cfg.ClientAddr(r)) }
	if a, err := verify(tok); err == nil {
		g.keepHandoff(w, r, a, verify)
	}
	if !dropToken(w, r) {
		next.ServeHTTP(w, r)
	}
}

// keepHandoff stores the verified hand-off's admission a in the cookie, unless the cookie holds
// a live admission of another ticket: the visitor's own is not replaced (a link from any site
// can carry a token of its choice), and is returned instead.
func (g *Gate) keepHandoff(w http.ResponseWriter, r *http.Request, a Admission, verify func(string) (Admission, error)) Admission {
	if held, ok := g.heldAdmission(r, verify); ok && held.TicketID != a.TicketID {
		return held
	}
	g.setCookie(w, r, a)
	return a
}

// dropToken answers a GET or HEAD carrying a hand-off with 303 to the same URL without the
// token, so that it does not linger in the address bar, history or Referer, and reports
// whether it answered (other methods: the caller serves the request).
func dropToken(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	http.Redirect(w, r, withoutToken(r), http.StatusSeeOther)
	return true
}

// heldAdmission is the admission of the request's cookie, when it holds one that verifies.
func (g *Gate) heldAdmission(r *http.Request, verify func(string) (Admission, error)) (Admission, bool) {
	c, err := r.Cookie(g.cfg.CookieName)
	if err != nil || c.Value == "" {
		return Admission{}, false
	}
	a, err := verify(c.Value)
	return a, err == nil
}

// sitePrefixes compiles Config.Paths for Site ("/" when there are none). Their order does not
// matter: Site asks only whether one matches (the gate's route sorts, to find the most specific
// rule's event).
func sitePrefixes(paths []string) []pathrule.Prefix {
	if len(paths) == 0 {
		paths = []string{"/"}
	}
	out := make([]pathrule.Prefix, len(paths))
	for i, p := range paths {
		out[i] = pathrule.NewPrefix(p)
	}
	return out
}

// Wrap is [Gate.Handler] for a handler function.
func (g *Gate) Wrap(next http.HandlerFunc) http.Handler { return g.Handler(next) }

func (g *Gate) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	var firstErr error
	client := g.cfg.ClientAddr(r)
	verify := func(tok string) (Admission, error) {
		if g.online != nil && !client.IsValid() {
			// Ambiguous: counted as no address, one admission would pass from any number.
			g.unknownLog.Do(func() {
				g.log.Error("gate: a visitor's address is unknown (a unix socket's peer has none): set Config.ClientAddr; admitted visitors whose address is unknown are turned away while OnlineCheck is on",
					"remote_addr", r.RemoteAddr)
			})
			return Admission{}, ErrClientUnknown
		}
		return g.VerifyFrom(r.Context(), tok, client)
	}
	note := func(err error) {
		if firstErr == nil || errors.Is(firstErr, ErrKeysUnavailable) && !errors.Is(err, ErrKeysUnavailable) {
			firstErr = err
		}
	}

	// 1. The hand-off from the waiting-room page. It does not replace a live admission of
	// another ticket in the cookie: a link from any site could carry the token of its choice.
	if tok, ok := queryToken(r); ok {
		a, err := verify(tok)
		if err == nil {
			a = g.keepHandoff(w, r, a, verify)
			if !dropToken(w, r) {
				g.pass(w, r.WithContext(NewContext(r.Context(), a)), next, a.Number)
			}
			return
		}
		note(err)
	}

	// 2. The cookie.
	var staleCookie bool
	if c, err := r.Cookie(g.cfg.CookieName); err == nil && c.Value != "" {
		a, err := verify(c.Value)
		if err == nil {
			g.pass(w, r.WithContext(NewContext(r.Context(), a)), next, a.Number)
			return
		}
		note(err)
		staleCookie = !errors.Is(err, ErrKeysUnavailable) && !errors.Is(err, ErrOnlineUnavailable) &&
			!errors.Is(err, ErrClientUnknown) && r.Context().Err() == nil
	}

	// 3. A bearer token.
	if tok, ok := BearerToken(r); ok {
		a, err := verify(tok)
		if err == nil {
			g.pass(w, r.WithContext(NewContext(r.Context(), a)), next, a.Number)
			return
		}
		note(err)
	}

	if r.Context().Err() != nil {
		return // the client went away while a key fetch or an online check ran
	}
	if staleCookie {
		http.SetCookie(w, &http.Cookie{
			Name: g.cfg.CookieName, Value: "", Path: g.cfg.CookiePath, Domain: g.cfg.CookieDomain,
			MaxAge: -1, HttpOnly: true, Secure: g.isHTTPS(r), SameSite: http.SameSiteLaxMode,
		})
	}
	g.deny(w, r, firstErr)
}

// deny answers a request without a valid admission; err is the first token's error (nil when
// the request carried none).
func (g *Gate) deny(w http.ResponseWriter, r *http.Request, err error) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	if errors.Is(err, ErrClientUnknown) {
		writeProblem(w, http.StatusServiceUnavailable, "admission_unavailable", "Admission cannot be checked",
			"this site cannot tell the visitor's address, which the admission check counts", nil)
		return
	}
	if errors.Is(err, ErrKeysUnavailable) || errors.Is(err, ErrOnlineUnavailable) {
		h.Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "admission_unavailable", "Admission cannot be checked",
			"the waiting room's keys or admission check are not available; retry", nil)
		return
	}
	if acceptsHTML(r) {
		http.Redirect(w, r, g.returnVia(r), http.StatusSeeOther)
		return
	}
	detail := "this resource needs an admission from the waiting room: join the line at " + g.roomURL
	challenge := `Bearer realm="waitroom admission"`
	if err != nil {
		detail = "the admission is not valid (" + shortReason(err) + "): join the line at " + g.roomURL
		challenge += `, error="invalid_token"`
	}
	h.Set("WWW-Authenticate", challenge)
	writeProblem(w, http.StatusUnauthorized, "admission_required", "Admission required", detail,
		map[string]any{"waiting_room_url": g.roomURL})
}

// returnVia is where a browser without an admission is sent: the waiting-room page, with
// ?return_url= the page it asked for (a GET or HEAD, without a hand-off's token), so that an
// admitted visitor whose token ran out comes back to that page, not to the event's
// redirect_url. The page takes return_url only on redirect_url's own origin (a Host the
// visitor forged names another and is not followed). A POST's body cannot be sent again: it
// goes to the page alone.
func (g *Gate) returnVia(r *http.Request) string {
	if (r.Method != http.MethodGet && r.Method != http.MethodHead) || r.Host == "" {
		return g.roomURL
	}
	scheme := "http://"
	if g.isHTTPS(r) {
		scheme = "https://"
	}
	return g.roomURL + "?return_url=" + url.QueryEscape(scheme+r.Host+withoutToken(r))
}

// shortReason is err's message without the package prefix, for the problem's detail.
func shortReason(err error) string {
	msg := err.Error()
	for _, p := range []string{"gate: invalid admission token: ", "gate: "} {
		if strings.HasPrefix(msg, p) {
			return strings.TrimPrefix(msg, p)
		}
	}
	return msg
}

func writeProblem(w http.ResponseWriter, status int, code, title, detail string, extra map[string]any) {
	body := map[string]any{
		"type":   "urn:waitroom:problem:" + code,
		"title":  title,
		"status": status,
		"detail": detail,
		"code":   code,
	}
	for k, v := range extra {
		body[k] = v
	}
	b, _ := json.Marshal(body) // strings and ints only
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// setCookie stores the admission token in the cookie until the token's exp.
func (g *Gate) setCookie(w http.ResponseWriter, r *http.Request, a Admission) {
	http.SetCookie(w, &http.Cookie{
		Name:     g.cfg.CookieName,
		Value:    a.Token,
		Path:     g.cfg.CookiePath,
		Domain:   g.cfg.CookieDomain,
		MaxAge:   maxAge(a.Expires, g.cfg.Clock.Now()),
		HttpOnly: true,
		Secure:   g.isHTTPS(r),
		SameSite: http.SameSiteLaxMode,
	})
}

// isHTTPS decides the cookie's Secure flag: TLS, or with TrustForwardedProto the proxy's
// X-Forwarded-Proto, by the waiting room's rule (clientaddr.Resolver.HTTPS: a list by its
// first value, and with TrustedProxies only theirs).
func (g *Gate) isHTTPS(r *http.Request) bool {
	switch {
	case r.TLS != nil:
		return true
	case !g.cfg.TrustForwardedProto:
		return false
	case g.proxies != nil:
		return g.proxies.HTTPS(r)
	default:
		return clientaddr.ForwardedHTTPS(r.Header)
	}
}

// queryToken returns the ?waitroom_token= parameter, if present and non-empty.
func queryToken(r *http.Request) (string, bool) {
	if !strings.Contains(r.URL.RawQuery, QueryParam) {
		return "", false
	}
	tok := r.URL.Query().Get(QueryParam)
	return tok, tok != ""
}

// BearerToken returns the token of r's "Authorization: Bearer <token>" header (RFC 6750 §2.1;
// the scheme's name in any case, the token without the spaces around it), and false when there
// is none: no Authorization field, another scheme, an empty token, or more than one
// Authorization field. A request carries one set of credentials (RFC 9110 §11.6.2 defines the
// field as a single credentials value); with two, which one a proxy in front reads and which one
// the handler reads would be a guess, so neither counts. The Waitroom service reads its
// admission tokens, identity tokens and admin keys by this same rule.
func BearerToken(r *http.Request) (string, bool) {
	v := r.Header["Authorization"]
	if len(v) != 1 {
		return "", false
	}
	h := v[0]
	if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
		return "", false
	}
	tok := strings.TrimSpace(h[7:])
	return tok, tok != ""
}

// acceptsHTML reports whether the request's Accept header names text/html (a browser's
// navigation), with a q-value above 0.
func acceptsHTML(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			media, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if !strings.EqualFold(strings.TrimSpace(media), "text/html") {
				continue
			}
			for _, p := range strings.Split(params, ";") {
				k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.EqualFold(k, "q") {
					if q, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil && q == 0 {
						return false
					}
				}
			}
			return true
		}
	}
	return false
}

// withoutToken returns the request's target as the client sent it (path and query, so a
// prefix stripped by an outer handler is kept), without the waitroom_token parameter and with
// the other parameters in their order. The result always starts with a single "/", so the
// redirect cannot leave the site.
func withoutToken(r *http.Request) string {
	u := r.URL
	if r.RequestURI != "" {
		if p, err := url.ParseRequestURI(r.RequestURI); err == nil {
			u = p
		}
	}
	path := u.EscapedPath()
	path = "/" + strings.TrimLeft(path, "/\\")
	var kept []string
	for _, part := range strings.Split(u.RawQuery, "&") {
		if part == "" {
			continue
		}
		k, _, _ := strings.Cut(part, "=")
		if name, err := url.QueryUnescape(k); err == nil && name == QueryParam {
			continue
		}
		kept = append(kept, part)
	}
	if len(kept) == 0 {
		return path
	}
	return path + "?" + strings.Join(kept, "&")
}
