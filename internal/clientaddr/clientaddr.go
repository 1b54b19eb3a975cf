// Package clientaddr tells who a request comes from, for every listener of the service (the
// API, the gate, the forward-auth check, push): the one rule for the limits per client, the
// bypass by address, the chain the gate forwards, and the address the audit names.
//
// # The trust rule
//
// The client is the connection's peer, unless the peer is one of the operator's trusted
// proxies (--trusted-proxies). Then the header those proxies write (Header: X-Forwarded-For
// by default, or Forwarded of RFC 7239, never both: a proxy that maintains one passes the
// other through as the client wrote it) is read from right to left. Each entry was written by
// the hop to its right, which is trusted while the walk goes on, so it is believed:
//
//   - the first entry that is not a trusted proxy is the client;
//   - when every entry is a trusted proxy, the left-most is the client;
//   - an entry that is not an address (garbage, a Forwarded "unknown" or obfuscated node, an
//     element without for=) ends the walk: the client is the last hop believed, the one that
//     passed the garbage on. Nothing left of it is ever believed, since the client could have
//     written it.
//
// Entries may carry a port ("203.0.113.5:4711", "[2001:db8::1]:4711"), which is dropped.
//
// Addresses are grouped into keys: an IPv4 address is its own key, an IPv6 address is keyed by
// its /64 (one subscriber's network: RFC 6177 recommends giving each site at least a /64 and a
// host can pick any address in it, so one client owns a whole /64).
package clientaddr

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Header is the forwarding header the trusted proxies write.
type Header uint8

const (
	// XForwardedFor: X-Forwarded-For, a comma-separated list of addresses (nginx's
	// $proxy_add_x_forwarded_for, HAProxy's option forwardfor, Envoy, Traefik, cloud load
	// balancers). The default.
	XForwardedFor Header = iota
	// Forwarded: RFC 7239's Forwarded, the for= parameter of each element.
	Forwarded
)

// String is the header's name.
func (h Header) String() string {
	if h == Forwarded {
		return "Forwarded"
	}
	return "X-Forwarded-For"
}

// ParseHeader reads a header's name, case-insensitively ("" is X-Forwarded-For). Errors: any
// other name.
func ParseHeader(s string) (Header, error) {
	switch {
	case s == "" || strings.EqualFold(s, "X-Forwarded-For"):
		return XForwardedFor, nil
	case strings.EqualFold(s, "Forwarded"):
		return Forwarded, nil
	}
	return 0, fmt.Errorf("%q is neither X-Forwarded-For nor Forwarded", s)
}

// Resolver finds the client of requests. The zero value, and a nil *Resolver, trust no proxy.
type Resolver struct {
	trusted   []netip.Prefix
	header    Header
	untrusted func(peer netip.Addr, header string)
}

// OnUntrustedForwarding makes Notice call f for every request whose peer is not a trusted proxy
// but carries X-Forwarded-For or Forwarded (the header named): the sign of a load balancer
// missing from --trusted-proxies, which makes every client behind it one client for the
// limits. f must be cheap and safe for concurrent use. Set it before the resolver is used.
func (r *Resolver) OnUntrustedForwarding(f func(peer netip.Addr, header string)) { r.untrusted = f }

// Notice checks req for forwarding headers from an untrusted peer (OnUntrustedForwarding). The
// listeners call it once per request; a request without the headers costs two map lookups.
func (r *Resolver) Notice(req *http.Request) {
	if r == nil || r.untrusted == nil {
		return
	}
	header := "X-Forwarded-For"
	if len(req.Header[header]) == 0 {
		if header = "Forwarded"; len(req.Header[header]) == 0 {
			return
		}
	}
	if peer := Peer(req); peer.IsValid() && !r.Trusted(peer) {
		r.untrusted(peer, header)
	}
}

// New returns a Resolver that believes header only on connections from an address inside one
// of trusted.
func New(trusted []netip.Prefix, header Header) *Resolver {
	return &Resolver{trusted: append([]netip.Prefix(nil), trusted...), header: header}
}

// ParseCIDRs parses a comma-separated list of CIDRs or bare addresses ("10.0.0.0/8,::1"); an
// empty string is an empty list. Errors: the first entry that is neither (ParseCIDR).
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		p, err := ParseCIDR(part)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// ParseCIDR parses one CIDR or bare address (an address is its own /32 or /128) as the
// resolver matches client addresses: masked, and an IPv4-mapped IPv6 range
// (::ffff:10.0.0.0/104) as the IPv4 range it maps (10.0.0.0/8), since client addresses are
// unmapped before they are matched. Every range that decides who the client is (trusted
// proxies, a gate's bypass) is read by this. Errors: s is neither.
func ParseCIDR(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (10.0.0.0/8) or an address", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Trusted reports whether a is one of the trusted proxies.
func (r *Resolver) Trusted(a netip.Addr) bool {
	if r == nil {
		return false
	}
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Header is the forwarding header the resolver reads.
func (r *Resolver) Header() Header {
	if r == nil {
		return XForwardedFor
	}
	return r.header
}

// PeerTrusted reports whether req's connection comes from a trusted proxy (whose other
// X-Forwarded-* headers, X-Forwarded-Proto say, may then be believed too).
func (r *Resolver) PeerTrusted(req *http.Request) bool {
	p := Peer(req)
	return p.IsValid() && r.Trusted(p)
}

// HTTPS reports whether req came over HTTPS: TLS on its own connection, or
// "X-Forwarded-Proto: https" (any case) from a trusted proxy (PeerTrusted). A chain of
// proxies that append ("https, http": the client reached the first over HTTPS, which reached
// the next over HTTP) is read by its first value, the client's own hop. A header from any
// other peer is the client's own word and not believed. It decides a cookie's Secure flag, at
// every door that sets one.
func (r *Resolver) HTTPS(req *http.Request) bool {
	if req.TLS != nil {
		return true
	}
	return r.PeerTrusted(req) && ForwardedHTTPS(req.Header)
}

// ForwardedHTTPS reports whether h's X-Forwarded-Proto says HTTPS: "https" (any case), a
// list by its first value (Resolver.HTTPS). It does not judge who wrote the header.
func ForwardedHTTPS(h http.Header) bool {
	first, _, _ := strings.Cut(h.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(first), "https")
}

// Addr returns the client's address of req by the package's trust rule. The zero Addr means
// the peer address could not be read (a test's request without RemoteAddr).
func (r *Resolver) Addr(req *http.Request) netip.Addr {
	client, _ := r.walk(req, nil)
	return client
}

// Chain returns the believed part of the forwarding chain of req, client first, then each
// trusted proxy, the peer last (the X-Forwarded-For the gate sends on to the origin); nil when
// the peer address could not be read.
func (r *Resolver) Chain(req *http.Request) []netip.Addr {
	_, chain := r.walk(req, func(a netip.Addr, chain []netip.Addr) []netip.Addr { return append(chain, a) })
	// Collected right to left.
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	return chain
}

// Key returns the limits' key of req's client (see KeyOf).
func (r *Resolver) Key(req *http.Request) string { return KeyOf(r.Addr(req)) }

// Peer returns the address of req's connection (RemoteAddr), the zero Addr when unreadable.
func Peer(req *http.Request) netip.Addr { return remote(req.RemoteAddr) }

// walk applies the trust rule to req; keep, when not nil, collects the believed hops (peer
// first).
func (r *Resolver) walk(req *http.Request, keep func(netip.Addr, []netip.Addr) []netip.Addr) (netip.Addr, []netip.Addr) {
	client := Peer(req)
	if !client.IsValid() {
		return client, nil
	}
	var chain []netip.Addr
	if keep != nil {
		chain = keep(client, chain)
	}
	if !r.Trusted(client) {
		return client, chain
	}
	name, parse := "X-Forwarded-For", xffEntry
	if r.header == Forwarded {
		name, parse = "Forwarded", forwardedEntry
	}
	values := req.Header[name] // canonical names
	for v := len(values) - 1; v >= 0; v-- {
		rest := values[v]
		for rest != "" {
			var entry string
			if i := strings.LastIndexByte(rest, ','); i >= 0 {
				entry, rest = rest[i+1:], rest[:i]
			} else {
				entry, rest = rest, ""
			}
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue // "a,,b": an empty entry says nothing
			}
			a, ok := parse(entry)
			if !ok {
				return client, chain // the walk ends: nothing left of garbage is believed
			}
			client = a
			if keep != nil {
				chain = keep(a, chain)
			}
			if !r.Trusted(a) {
				return client, chain
			}
		}
	}
	return client, chain
}

// KeyOf returns the key of an address: the IPv4 address in dotted form, an IPv6 address's /64
// as "2001:db8:1:2::/64", "" for the zero Addr.
func KeyOf(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	g := Group(a)
	if g.Addr().Is4() {
		return g.Addr().String()
	}
	return g.String()
}

// Group is the client an address belongs to, as KeyOf names it, without allocating: the IPv4
// address as a /32, an IPv6 address's /64; the zero Prefix for the zero Addr.
func Group(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	a = a.Unmap()
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.WithZone("").Prefix(64) // cannot fail for an IPv6 address
	return p
}

// remote parses a RemoteAddr or a forwarded address ("ip:port", "[ip]:port", or a bare ip).
func remote(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		s = s[1 : len(s)-1] // "[2001:db8::1]" without a port
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

// xffEntry reads one entry of X-Forwarded-For.
func xffEntry(s string) (netip.Addr, bool) {
	a := remote(s)
	return a, a.IsValid()
}

// forwardedEntry reads the for= address of one element of Forwarded (RFC 7239 section 4:
// pairs separated by ";", the value a token or a quoted string, an IPv6 address in brackets
// with an optional port). An element without for=, or with "unknown" or an obfuscated node
// (section 6.3), has no address.
func forwardedEntry(elem string) (netip.Addr, bool) {
	var found netip.Addr
	seen := false
	for elem != "" {
		var pair string
		pair, elem, _ = strings.Cut(elem, ";")
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "for") {
			continue
		}
		if seen {
			return netip.Addr{}, false // for= twice in one element: malformed
		}
		seen = true
		v = strings.TrimSpace(v)
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		found = remote(v)
	}
	return found, found.IsValid()
}
