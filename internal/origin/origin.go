// Package origin decides which web sites' pages may make their visitors' browsers join a line
// or open a push connection (issue 12: cross-site joins). A browser names the page's site in
// the Origin header of a cross-site POST and of every WebSocket handshake; a request without
// one is not a browser's (server to server) and is not affected.
package origin

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Policy is the list of allowed origins. The zero value (or nil) allows the same origin only:
// an Origin whose host:port is the request's Host. With a list, only the origins listed are
// allowed — name this service's own public origin there too when its pages are used; a list
// also defeats DNS rebinding, which the Host comparison cannot (the attacker's name is then
// both the Origin and the Host).
type Policy struct {
	allowed map[string]bool // "scheme://host[:port]", lower case
	any     bool
	refused func(origin, host string)
}

// OnRefused makes Check call f with the Origin and the Host of each request it refuses (not
// for several Origin headers), so that the operator can be told (a proxy that passes on
// another Host than the visitor wrote refuses every page). f must be safe for concurrent use
// and quick. Call it before p is used.
func (p *Policy) OnRefused(f func(origin, host string)) { p.refused = f }

// Check is Allowed for a request that is refused (403) when it is not allowed: a refusal is
// told to the OnRefused hook. Allowed alone decides without telling (whether to add CORS
// headers to an answer given anyway).
func (p *Policy) Check(r *http.Request) bool {
	return p.checkAt(r.Header, r.Host)
}

// checkAt is Check of a request with header h that the visitor sent to host.
func (p *Policy) checkAt(h http.Header, host string) bool {
	ok, o := p.judge(h, host)
	if !ok && o != "" && p != nil && p.refused != nil {
		p.refused(o, host)
	}
	return ok
}

// MayJoin reports whether a request to a door that takes a place in line for any request to a
// protected path (the gate's listener and the forward-auth check, package gateway) may take
// one for its visitor: h is the request's header and host the Host the visitor wrote (for
// the check, X-Forwarded-Host). The API's join is a POST that a page's script makes, which
// Check judges by its Origin; a page on another site can make a browser request the gate's
// paths without a script and without an Origin (an image, a script, a frame, a prefetch), and
// each such request, made without the visitor's cookie (SameSite=Lax withholds it), would take
// a new place from the visitor's own address. A browser says where a request comes from in
// Fetch Metadata (W3C), which a page cannot set. So:
//
//   - Sec-Fetch-Site same-origin, same-site or none (typed, a bookmark): the site's own page
//     or the visitor; a place, whatever its Origin says ("null" under a no-referrer policy,
//     another port of the same host behind a proxy, a sibling host's script);
//   - cross-site: with an Origin, judged as Check judges it (another site's form POST is
//     refused, an allowed site's fetch is not; a refusal is told to the OnRefused hook);
//     without one, a place only for a top-level navigation (Sec-Fetch-Mode: navigate,
//     Sec-Fetch-Dest: document: a link followed from another site) that is not a prefetch
//     (Sec-Purpose or Purpose naming prefetch: speculation rules, which browsers send for a
//     site the visitor has no cookies for);
//   - without Fetch Metadata (a client that is not a browser, or an old one): an Origin is
//     judged as Check judges it; without one, a place, under the limits per client as always.
//
// Any of these headers sent twice takes no place.
func (p *Policy) MayJoin(h http.Header, host string) bool {
	site, ok := only(h, "Sec-Fetch-Site")
	if !ok {
		return false
	}
	switch strings.ToLower(site) {
	case "same-origin", "same-site", "none":
		return true
	case "cross-site":
		if len(h.Values("Origin")) > 0 {
			return p.checkAt(h, host)
		}
		mode, ok1 := only(h, "Sec-Fetch-Mode")
		dest, ok2 := only(h, "Sec-Fetch-Dest")
		purpose, ok3 := only(h, "Sec-Purpose")
		legacy, ok4 := only(h, "Purpose")
		return ok1 && ok2 && ok3 && ok4 && strings.EqualFold(mode, "navigate") && strings.EqualFold(dest, "document") &&
			!strings.Contains(strings.ToLower(purpose+legacy), "prefetch")
	}
	if len(h.Values("Origin")) > 0 {
		return p.checkAt(h, host)
	}
	return true
}

// FromSite reports whether a browser says that the request of header h comes from the site
// itself or the visitor (Sec-Fetch-Site same-origin, same-site or none), or h carries no Fetch
// Metadata (a client that is not a browser, or an old one): not a request another site's page
// made the visitor's browser send (cross-site, or the header sent twice). The gate gives the
// cookie of a ticket read only to such a request, so that another site cannot plant a ticket
// of its choosing in a visitor's cookie with a link to the read.
func FromSite(h http.Header) bool {
	site, ok := only(h, "Sec-Fetch-Site")
	if !ok {
		return false
	}
	switch strings.ToLower(site) {
	case "", "same-origin", "same-site", "none":
		return true
	}
	return false
}

// only returns the value of the header field name when it is sent at most once ("" when not
// sent), and false when it is sent more than once.
func only(h http.Header, name string) (string, bool) {
	v := h.Values(name)
	if len(v) > 1 {
		return "", false
	}
	if len(v) == 0 {
		return "", true
	}
	return strings.TrimSpace(v[0]), true
}

// Parse reads a comma-separated list of origins ("https://shop.example,http://localhost:8080");
// "*" allows every origin; "" is the same-origin default. Errors: an entry that is not
// scheme://host[:port] without a path.
func Parse(list string) (*Policy, error) {
	p := &Policy{allowed: map[string]bool{}}
	for _, o := range strings.Split(list, ",") {
		o = strings.TrimSpace(o)
		switch {
		case o == "":
			continue
		case o == "*":
			p.any = true
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") ||
			u.RawQuery != "" || u.User != nil {
			return nil, fmt.Errorf("%q is not an origin like https://shop.example", o)
		}
		p.allowed[strings.ToLower(u.Scheme+"://"+u.Host)] = true
	}
	return p, nil
}

// Allowed reports whether r may proceed: no Origin header (not a browser), or one Origin that
// the policy allows. Several Origin headers are refused (a browser sends one); so is "null"
// (sandboxed or privacy-sensitive contexts) unless every origin is allowed.
func (p *Policy) Allowed(r *http.Request) bool {
	ok, _ := p.judge(r.Header, r.Host)
	return ok
}

// judge is Allowed of a request with header h sent to host, with the one Origin it judged
// (lower case; "" when none, or several).
func (p *Policy) judge(h http.Header, host string) (ok bool, o string) {
	vals := h.Values("Origin")
	switch {
	case len(vals) == 0:
		return true, ""
	case len(vals) > 1:
		return false, ""
	}
	o = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(vals[0]), "/"))
	switch {
	case p != nil && p.any:
		return true, o
	case p != nil && len(p.allowed) > 0:
		return p.allowed[o], o
	}
	_, oh, cut := strings.Cut(o, "://")
	return cut && oh != "" && strings.EqualFold(oh, host), o
}
