package gateway

import (
	"cmp"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/waitroom/waitroom/internal/httpjson"
	"github.com/waitroom/waitroom/internal/pathrule"
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
	events    map[string]bool  // the events some site protects
}

type site struct {
	origin      *url.URL
	protect     []protected       // longest prefix first
	prefixes    []pathrule.Prefix // protect's prefixes, compiled, in the same order
	bypass      []string
	queryRoutes bool // Site.QueryRoutes
	// events: its protect rules name more than one event, so that the readings of a path (or
	// of its query) must agree on the event (pathrule.Each).
	events bool
}

type protected struct {
	prefix string // as the file gives it
	event  string
	origin *url.URL // nil = the site's
}

// match is what one request maps to.
type match struct {
	site   bool     // a site of the file serves the host (its own, or one for any host)
	origin *url.URL // where to proxy (nil: no site, or forward-auth only)
	event  string   // "" = not protected, or bypassed
	bypass bool     // passed straight through by a bypass (path, address or header)
	// ambiguous: readings of the path (or of its query) fall under protected prefixes of
	// different events; refused (400 invalid_path), neither event's to pass.
	ambiguous bool
}

func compile(f File) (*routes, error) {
	rt := &routes{sites: map[string]*site{}, header: f.Bypass.Header, secret: f.Bypass.Secret, events: map[string]bool{}}
	rt.header = cmp.Or(rt.header, DefaultBypassHeader)
	rt.headerKey = strings.ToLower(strings.ReplaceAll(rt.header, "_", "-"))
	rt.bypass = f.Bypass.Paths
	for _, c := range f.Bypass.CIDRs {
		p, _ := parsePrefix(c) // checked by Parse
		rt.cidrs = append(rt.cidrs, p)
	}
	for _, s := range f.Sites {
		cs := &site{bypass: s.BypassPaths, queryRoutes: s.QueryRoutes == nil || *s.QueryRoutes}
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
			rt.events[r.Event] = true
			for _, p := range r.Paths {
				cs.protect = append(cs.protect, protected{prefix: p, event: r.Event, origin: o})
			}
		}
		// Longest prefix first, so that the most specific rule wins.
		for i := 1; i < len(cs.protect); i++ {
			for j := i; j > 0 && len(cs.protect[j].prefix) > len(cs.protect[j-1].prefix); j-- {
				cs.protect[j], cs.protect[j-1] = cs.protect[j-1], cs.protect[j]
			}
		}
		for _, pr := range cs.protect {
			cs.prefixes = append(cs.prefixes, pathrule.NewPrefix(pr.prefix))
			cs.events = cs.events || pr.event != cs.protect[0].event
		}
		if cs.events {
			// Deepest first where the rule decides the event: a fullwidth /ｓｈｏｐ/x is longer
			// than another event's /shop/x/y, not more specific (pathrule.Each).
			pathrule.SortDeepest(cs.prefixes, func(i, j int) { cs.protect[i], cs.protect[j] = cs.protect[j], cs.protect[i] })
		}
		rt.sites[s.Host] = cs
	}
	return rt, nil
}

// readHost reads a Host header (or X-Forwarded-Host) as the gate matches it against its sites:
// lower case, without its port and without one trailing dot; an IPv6 address in brackets, in
// its canonical form ("[::1]"). ok is false for a value that servers read in different ways
// (RFC 9112 3.2: a server answers 400 to an invalid Host): one that is not a bracketed IPv6
// address or a name of letters, digits, "-" and "_" in non-empty labels separated by ".", with
// at most one trailing ".", then optionally ":" and a port of digits. "vip.example:1:2" is
// nginx's vip.example and no host to Go's SplitHostPort; "vip.example%2e", "vip.example..",
// "[vip.example]" are each some server's vip.example: refused, not matched as another host.
// "" (an HTTP/1.0 request without a Host) reads as "", the site for any host.
func readHost(h string) (host string, ok bool) {
	if h == "" {
		return "", true
	}
	host, port := h, ""
	if h[0] == '[' {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return "", false
		}
		host, port = h[1:end], h[end+1:]
		if port != "" && port[0] != ':' {
			return "", false
		}
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", false
		}
		host = "[" + a.String() + "]"
	} else if i := strings.IndexByte(h, ':'); i >= 0 {
		host, port = h[:i], h[i:]
		if host == "" { // ":80": a port without a host
			return "", false
		}
	}
	if port != "" {
		for i := 1; i < len(port); i++ {
			if port[i] < '0' || port[i] > '9' {
				return "", false
			}
		}
	}
	if host[0] == '[' {
		return host, true
	}
	host = strings.TrimSuffix(host, ".")
	label := 0 // bytes of the label so far
	for i := 0; i < len(host); i++ {
		switch b := host[i]; {
		case b == '.':
			if label == 0 {
				return "", false
			}
			label = 0
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '-', b == '_':
			label++
		default:
			return "", false
		}
	}
	if label == 0 {
		return "", false
	}
	return strings.ToLower(host), true
}

// ambiguousPath is invalidPath's reason for a path whose readings fall under protected
// prefixes of different events (match.ambiguous).
const ambiguousPath = "the path (or its query) reads as under the protected paths of two events"

// invalidPath is the 400 problem of a path the path rule refuses (pathrule.Read, ReadQuery).
func invalidPath(why string) *httpjson.Problem {
	return httpjson.NewProblem(400, "invalid_path", pathrule.Refusal(why))
}

// invalidHost is the 400 problem of a Host (or X-Forwarded-Host) that readHost refuses.
func invalidHost(h string) *httpjson.Problem {
	return httpjson.NewProblem(400, "invalid_host", fmt.Sprintf("the host %q is not a host name or [IPv6 address] with an optional :port: "+
		"the waiting room refuses hosts that servers read in different ways", h))
}

// route maps a host (as readHost read it), a path (as pathrule.Read read it: the path rule),
// the query as sent and the client's request to what the gate does with it.
func (rt *routes) route(host string, p pathrule.Path, query string, client netip.Addr, h http.Header) match {
	s := rt.sites[host]
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
	i, byQuery := pathrule.Match(p, query, s.prefixes, s.queryRoutes)
	if i < 0 {
		return m
	}
	pr := s.protect[i]
	m.event = pr.event
	if s.events {
		// The most specific prefix of each reading must be of this event, and no reading may
		// be under another event's prefix beside it: "/checkout/../vip" is under /checkout as
		// sent and /vip resolved, and the origin serves /vip.
		same := func(i, j int) bool { return s.protect[i].event == s.protect[j].event }
		pathrule.Each(p, query, s.prefixes, s.queryRoutes, same, func(j int) bool {
			m.ambiguous = j < 0 || s.protect[j].event != pr.event
			return !m.ambiguous
		})
	}
	// A rule's own origin serves its paths; one matched by the query is the line of the rule,
	// not its origin: the path's front controller is the site's ("?x=checkout" must not reach
	// any path there).
	if pr.origin != nil && !byQuery {
		m.origin = pr.origin
	}
	return m
}

func (rt *routes) bypassed(p pathrule.Path, s *site, client netip.Addr, h http.Header) bool {
	for _, b := range rt.bypass {
		if p.BypassedBy(b) {
			return true
		}
	}
	for _, b := range s.bypass {
		if p.BypassedBy(b) {
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
