package gateway

import (
	"cmp"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// routes is the compiled gate file: what a request's host and path map to.
type routes struct {
	sites     map[string]*site // by lower-case host without port; "" = any host
	bypass    []string         // bypass path prefixes of every site
	cidrs     []netip.Prefix   // bypassed client addresses
	header    string           // bypass header name
	headerKey string           // the same, lower case, "_" read as "-" (gateHeader)
	secret    string           // bypass header value; "" = none
	hasProxy  bool             // some site has an origin (gate mode)
}

type site struct {
	origin  *url.URL
	protect []protected // longest prefix first
	bypass  []string
}

type protected struct {
	prefix string   // as the file gives it
	segs   []string // its segments, folded (prefixSegments)
	event  string
	origin *url.URL // nil = the site's
}

// match is what one request maps to.
type match struct {
	site   bool     // a site of the file serves the host (its own, or one for any host)
	origin *url.URL // where to proxy (nil: no site, or forward-auth only)
	event  string   // "" = not protected, or bypassed
	bypass bool     // passed straight through by a bypass (path, address or header)
}

func compile(f File) (*routes, error) {
	rt := &routes{sites: map[string]*site{}, header: f.Bypass.Header, secret: f.Bypass.Secret}
	rt.header = cmp.Or(rt.header, DefaultBypassHeader)
	rt.headerKey = strings.ToLower(strings.ReplaceAll(rt.header, "_", "-"))
	rt.bypass = f.Bypass.Paths
	for _, c := range f.Bypass.CIDRs {
		p, _ := parsePrefix(c) // checked by Parse
		rt.cidrs = append(rt.cidrs, p)
	}
	for _, s := range f.Sites {
		cs := &site{bypass: s.BypassPaths}
		if s.Origin != "" {
			u, err := url.Parse(s.Origin)
			if err != nil {
				return nil, err
			}
			cs.origin = u
			rt.hasProxy = true
		}
		for _, r := range s.Protect {
			var o *url.URL
			if r.Origin != "" {
				u, err := url.Parse(r.Origin)
				if err != nil {
					return nil, err
				}
				o = u
				rt.hasProxy = true
			}
			for _, p := range r.Paths {
				cs.protect = append(cs.protect, protected{prefix: p, segs: prefixSegments(p), event: r.Event, origin: o})
			}
		}
		// Longest prefix first, so that the most specific rule wins.
		for i := 1; i < len(cs.protect); i++ {
			for j := i; j > 0 && len(cs.protect[j].prefix) > len(cs.protect[j-1].prefix); j-- {
				cs.protect[j], cs.protect[j-1] = cs.protect[j-1], cs.protect[j]
			}
		}
		rt.sites[s.Host] = cs
	}
	return rt, nil
}

// hasPrefix reports whether p is under prefix on a segment boundary.
func hasPrefix(p, prefix string) bool {
	if !strings.HasPrefix(p, prefix) {
		return false
	}
	return len(p) == len(prefix) || strings.HasSuffix(prefix, "/") || p[len(prefix)] == '/'
}

// hostOnly is a Host header's lower-case host, without port.
func hostOnly(h string) string {
	if strings.IndexByte(h, ':') >= 0 { // without one, SplitHostPort only allocates its error
		if host, _, err := net.SplitHostPort(h); err == nil {
			h = host
		}
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// route maps a host, a path (as readPath read it: the gate's path rule) and the client's
// request to what the gate does with it.
func (rt *routes) route(host string, p reqPath, client netip.Addr, h http.Header) match {
	s := rt.sites[hostOnly(host)]
	if s == nil {
		s = rt.sites[""]
	}
	if s == nil {
		return match{}
	}
	m := match{site: true, origin: s.origin}
	if rt.bypassed(p, s, client, h) {
		m.bypass = true
		return m
	}
	for _, pr := range s.protect {
		if p.under(pr.segs) {
			m.event = pr.event
			if pr.origin != nil {
				m.origin = pr.origin
			}
			break
		}
	}
	return m
}

func (rt *routes) bypassed(p reqPath, s *site, client netip.Addr, h http.Header) bool {
	for _, b := range rt.bypass {
		if p.bypassedBy(b) {
			return true
		}
	}
	for _, b := range s.bypass {
		if p.bypassedBy(b) {
			return true
		}
	}
	if client.IsValid() {
		for _, c := range rt.cidrs {
			if c.Contains(client) {
				return true
			}
		}
	}
	return rt.secret != "" && secretEqual(h.Get(rt.header), rt.secret)
}
