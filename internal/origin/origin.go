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
	ok, o := p.judge(r)
	if !ok && o != "" && p != nil && p.refused != nil {
		p.refused(o, r.Host)
	}
	return ok
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
	ok, _ := p.judge(r)
	return ok
}

// judge is Allowed, with the one Origin it judged (lower case; "" when none, or several).
func (p *Policy) judge(r *http.Request) (ok bool, o string) {
	vals := r.Header.Values("Origin")
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
	_, host, cut := strings.Cut(o, "://")
	return cut && host != "" && strings.EqualFold(host, r.Host), o
}
