package gateway

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/pathrule"
)

// Check is the forward-auth endpoint (/v1/gate/check, any method of RouteChecks) for nginx
// auth_request, ingress-nginx's auth-url, Envoy ext_authz (HTTP service) and Traefik
// ForwardAuth. It reads the original request from the proxy's headers — the URI from
// X-Original-URI (nginx), X-Forwarded-Uri (Traefik, Envoy) or X-Original-URL (ingress-nginx;
// originalURI), the host from X-Original-URL, else X-Forwarded-Host, else Host, the client
// by package clientaddr's rule (the one of every listener: the proxy's X-Forwarded-For, or Forwarded,
// when it is a trusted proxy) — and the visitor's cookie, and answers (whatever the original
// method, X-Forwarded-Method or the check's own: every method of a protected path waits):
//
//   - 200 with no X-Waitroom-* headers: the path is not protected, or bypassed;
//   - 200 with X-Waitroom-Event, -Ticket, -Number and -Admitted-Until, and a Set-Cookie when
//     the admission token was renewed: an admitted visitor, to be passed to the origin;
//   - 401 with X-Waitroom-Location (the waiting-room page, coming back to the original URI),
//     X-Waitroom-Event, -Ticket and -Number (the ticket), -Position, -Waiting and -Eta-S (the
//     place, the line's length and the estimated wait in s, absent while unknown: the body's
//     position, waiting and eta_s), Retry-After, Set-Cookie (the place in line) and a
//     problem+json body (code waiting_room): a visitor who waits;
//   - 401 with X-Waitroom-Location and -Event but no ticket, place or cookie, for a request
//     without an admission that takes no place (takesPlace: a CORS preflight, another site's
//     image, script or frame, or its form's POST);
//   - 410 (event_closed, sold_out) or 503 (store_unavailable) problems otherwise;
//   - 404 not_found with X-Waitroom-Problem, for a host that no site of the file serves (every
//     site names its host, and none this one's), whatever the path: as the gate's listener
//     answers it, never a pass;
//   - 400 with X-Waitroom-Problem naming the code, for a request it refuses: a URI that is not
//     /path?query (invalid_original_uri), a path the gate's path rule refuses (invalid_path:
//     pathrule.Read; the proxy forwards the path as it came, so the check refuses what it cannot
//     read one way), a host that servers read in different ways (invalid_host: readHost;
//     "vip.example:1:2" is nginx's vip.example), or an X-Waitroom-* header the proxy cannot
//     be relied on to clear (invalid_header: forgedHeader).
//
// It never sets more than one cookie, since nginx passes on only the first Set-Cookie of an
// auth subrequest.
func (g *Gateway) Check(w http.ResponseWriter, r *http.Request) {
	// Which request is asked about must be said once: a proxy sets one URI header, and a
	// second one (a client's own, which a proxy such as Traefik passes on) could make a
	// protected request read as an unprotected one. Ambiguity is refused, not guessed.
	uri, urlHost, fromURL, why := originalURI(r.Header)
	if why != "" {
		refuse(w, httpjson.NewProblem(400, "invalid_original_uri", why))
		return
	}
	host, ok := httpjson.OnlyValue(r.Header, "X-Forwarded-Host")
	if !ok || strings.Contains(host, ",") {
		refuse(w, httpjson.NewProblem(400, "invalid_original_uri", "X-Forwarded-Host must name one host"))
		return
	}
	if fromURL {
		// ingress-nginx names the host only in X-Original-URL, from the visitor's own Host
		// header ($http_host; its Host here is the check's own), and passes the client's
		// X-Forwarded-Host on. An absolute-form request picks nginx's server by the host in
		// its request line whatever Host says (helper-79: "GET http://shop.example/checkout"
		// with "Host: blog.example" gave http://blog.example/checkout), so that host names the
		// site only when the file has one: with several, the proxy must set X-Forwarded-Host
		// ($host) too, and the two must agree. Empty (HTTP/1.0 without a Host) is refused, not
		// read as the check's own Host.
		why := ""
		switch {
		case urlHost == "":
			why = "X-Original-URL names no host"
		case host == "" && len(g.routes.sites) > 1:
			why = "with several sites, X-Original-URL's host is the visitor's own Host header: the proxy must set X-Forwarded-Host ($host) beside it"
		case host != "" && mustHost(host) != mustHost(urlHost):
			why = "X-Forwarded-Host names another host than X-Original-URL"
		}
		if why != "" {
			refuse(w, httpjson.NewProblem(400, "invalid_original_uri", why))
			return
		}
		host = urlHost
	}
	if host == "" {
		host = r.Host
	}
	rawHost := host
	if host, ok = readHost(rawHost); !ok {
		refuse(w, invalidHost(rawHost))
		return
	}
	u, err := url.ParseRequestURI(uri)
	if err != nil || uri[0] != '/' || strings.ContainsFunc(uri, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		// Origin form only (RFC 9112 3.2.1): a proxy forwards the path it received; an
		// absolute URI here is not what a proxy sends, and its host would be one more thing read
		// two ways. Nor is a space or a control character, which no request line carries
		// ("/static/x /vip" would pass as under /static/, where a server may read /vip).
		refuse(w, httpjson.NewProblem(400, "invalid_original_uri", "the original URI is not a request URI (/path?query)"))
		return
	}
	p, bad := pathrule.Read(u.Path, u.RawPath)
	if bad == "" {
		bad = pathrule.ReadQuery(u.RawQuery)
	}
	if bad != "" {
		refuse(w, invalidPath(bad))
		return
	}
	if name := forgedHeader(r.Header); name != "" {
		refuse(w, httpjson.NewProblem(400, "invalid_header", "the request carries "+name+
			": a header of the waiting room's (X-Waitroom-*) that it does not define, or written with _"))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	client := g.cfg.Clients.Addr(r)
	m := g.routes.route(host, p, u.RawQuery, client, r.Header)
	if m.ambiguous {
		refuse(w, invalidPath(ambiguousPath))
		return
	}
	if !m.site {
		// A host no site of the file serves (when every site names its host) is refused, as
		// the gate's own listener refuses it: the proxy in front may send every host it
		// receives here (nginx's server_name _), and a protected path of the origin must not
		// pass because a visitor wrote another Host.
		refuse(w, noSite(host))
		return
	}
	if m.event == "" {
		httpjson.WriteJSON(w, 200, map[string]string{"decision": "pass"})
		return
	}
	https := g.isHTTPS(r)
	d := g.decide(r.Context(), r, rawHost, m.event, client)
	if d.cookie != nil {
		http.SetCookie(w, g.cookie(m.event, d.cookie.value, https, d.cookie.clear))
	}
	switch {
	case d.err != nil:
		g.writeError(w, r, m.event, d.err, false) // a 410 or 503: the proxy fails the request closed
	case d.noPlace:
		page := pageURL(m.event, "", u.RequestURI())
		w.Header().Set(HeaderLocation, page)
		w.Header().Set(HeaderEvent, m.event)
		httpjson.WriteProblem(w, noPlaceProblem(m.event, page, http.StatusUnauthorized))
	case d.visit != nil:
		setVisitHeaders(w.Header(), d.visit)
		httpjson.WriteJSON(w, 200, map[string]any{"decision": "admitted", "event_id": d.visit.event,
			"ticket_id": d.visit.ticketID, "number": d.visit.number,
			"admitted_until": d.visit.until.UTC().Format(httpjson.TimeLayout)})
	default:
		page := pageURL(m.event, g.tickets.Encode(d.ticket.TicketRef), u.RequestURI())
		p := g.waitProblem(m.event, d.ticket, page, http.StatusUnauthorized)
		w.Header().Set(HeaderLocation, page)
		w.Header().Set(HeaderEvent, m.event)
		w.Header().Set(HeaderTicket, g.tickets.Encode(d.ticket.TicketRef))
		w.Header().Set(HeaderNumber, strconv.FormatInt(d.ticket.Number, 10))
		w.Header().Set(HeaderPosition, strconv.FormatInt(d.ticket.Position, 10))
		w.Header().Set(HeaderWaiting, strconv.FormatInt(d.ticket.Waiting, 10))
		if eta, ok := p.Extra["eta_s"].(int64); ok {
			w.Header().Set(HeaderETA, strconv.FormatInt(eta, 10))
		}
		httpjson.WriteProblem(w, p)
	}
}

// refuse answers the check's own 400s, with the code in X-Waitroom-Problem.
func refuse(w http.ResponseWriter, p *httpjson.Problem) {
	w.Header().Set(HeaderProblem, p.Code)
	httpjson.WriteProblem(w, p)
}

// originalURI is the original request's URI (/path?query, as sent) that the proxy in front
// names: X-Original-URI (nginx), X-Forwarded-Uri (Traefik, Envoy) or X-Original-URL
// ($scheme://$http_host$request_uri: ingress-nginx's auth-url, which sets no X-Original-URI
// and passes the client's own headers on), and, from X-Original-URL, the host it names
// (fromURL). Each header given must be given once and all must name the same URI: a client's
// own "X-Original-URI: /static/x" beside ingress-nginx's X-Original-URL of /checkout would
// otherwise be read as the request. why says what is wrong ("" nothing).
func originalURI(h http.Header) (uri, urlHost string, fromURL bool, why string) {
	const none = "the check needs the original request's URI in X-Original-URI, X-Forwarded-Uri or X-Original-URL, each once, naming the same URI"
	n := 0
	for _, name := range [...]string{"X-Original-URI", "X-Forwarded-Uri", "X-Original-URL"} {
		vs := h.Values(name)
		if len(vs) > 1 {
			return "", "", false, none
		}
		if len(vs) == 0 {
			continue
		}
		v := vs[0]
		if name == "X-Original-URL" {
			// The request-target follows the host, which holds no "/" (nginx refuses a Host
			// with one), so it starts at the first "/" after the scheme.
			scheme, rest, ok := strings.Cut(v, "://")
			i := strings.IndexByte(rest, '/')
			if !ok || i < 0 || !strings.EqualFold(scheme, "http") && !strings.EqualFold(scheme, "https") {
				return "", "", false, "X-Original-URL is not an http or https URL with a path"
			}
			urlHost, v, fromURL = rest[:i], rest[i:], true
		}
		if n++; n > 1 && v != uri {
			return "", "", false, none
		}
		uri = v
	}
	if uri == "" {
		return "", "", false, none
	}
	return uri, urlHost, fromURL, ""
}

// mustHost is readHost's host of h, or "\x00" (no host's) when it does not read as one: two
// that do not read are alike here, and refused as hosts after (readHost).
func mustHost(h string) string {
	if r, ok := readHost(h); ok {
		return r
	}
	return "\x00"
}
