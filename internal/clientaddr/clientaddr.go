// Package clientaddr tells who a request comes from, for the limits per client: the address of
// the connection, or, when that connection is one of the operator's trusted proxies, the
// address the proxies recorded in Forwarded (RFC 7239) or X-Forwarded-For. Addresses are
// grouped into keys: an IPv4 address is its own key, an IPv6 address is keyed by its /64 (one
// subscriber's network: RFC 6177 recommends giving each site at least a /64 and a host can
// pick any address in it, so one client owns a whole /64).
package clientaddr

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Resolver finds the client's address of requests. The zero value trusts no proxy.
type Resolver struct {
	trusted []netip.Prefix
}

// New returns a Resolver that honours Forwarded and X-Forwarded-For only on connections from
// an address inside one of trusted.
func New(trusted []netip.Prefix) *Resolver {
	return &Resolver{trusted: append([]netip.Prefix(nil), trusted...)}
}

// ParseCIDRs parses a comma-separated list of CIDRs or bare addresses ("10.0.0.0/8,::1"); an
// empty string is an empty list. Errors: the first entry that is neither.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if p, err := netip.ParsePrefix(part); err == nil {
			if p.Addr().Is4In6() {
				p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(part)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR (10.0.0.0/8) or an address", part)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func (r *Resolver) isTrusted(a netip.Addr) bool {
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Addr returns the client's address of req: the connection's peer (req.RemoteAddr); when the
// peer is a trusted proxy, the right-most address of the Forwarded header's for= parameters
// (or, without a Forwarded header, of X-Forwarded-For) that is not itself a trusted proxy —
// the addresses to its left were written by the client or by proxies nobody vouches for, so
// they are never believed. When every listed address is trusted, the left-most is the client.
// An unusable header leaves the peer as the client. The zero Addr means the peer address
// could not be read (a test's request without RemoteAddr).
func (r *Resolver) Addr(req *http.Request) netip.Addr {
	peer := remote(req.RemoteAddr)
	if !peer.IsValid() || r == nil || !r.isTrusted(peer) {
		return peer
	}
	var hops []netip.Addr
	if f := req.Header.Values("Forwarded"); len(f) > 0 {
		hops = forwardedFor(f)
	} else if x := req.Header.Values("X-Forwarded-For"); len(x) > 0 {
		hops = xForwardedFor(x)
	}
	if hops == nil {
		return peer
	}
	for i := len(hops) - 1; i >= 0; i-- {
		if !r.isTrusted(hops[i]) {
			return hops[i]
		}
	}
	return hops[0]
}

// Key returns the limits' key of req's client (see KeyOf).
func (r *Resolver) Key(req *http.Request) string { return KeyOf(r.Addr(req)) }

// KeyOf returns the key of an address: the IPv4 address in dotted form, an IPv6 address's /64
// as "2001:db8:1:2::/64", "" for the zero Addr.
func KeyOf(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, _ := a.WithZone("").Prefix(64) // cannot fail for an IPv6 address
	return p.String()
}

// remote parses a RemoteAddr ("ip:port", or a bare ip).
func remote(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

// xForwardedFor lists the addresses of X-Forwarded-For headers, left to right; nil when any
// entry is not an address (the header is not to be believed at all then).
func xForwardedFor(values []string) []netip.Addr {
	var out []netip.Addr
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			a := remote(strings.TrimSpace(part))
			if !a.IsValid() {
				return nil
			}
			out = append(out, a)
		}
	}
	return out
}

// forwardedFor lists the for= addresses of Forwarded headers (RFC 7239), left to right; nil
// when an element has no for= or an unusable one ("unknown", an obfuscated identifier), since
// the chain then cannot be followed.
func forwardedFor(values []string) []netip.Addr {
	var out []netip.Addr
	for _, v := range values {
		for _, elem := range strings.Split(v, ",") {
			var found netip.Addr
			for _, pair := range strings.Split(elem, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if !ok || !strings.EqualFold(k, "for") {
					continue
				}
				val = strings.Trim(val, `"`)
				if strings.HasPrefix(val, "[") { // "[2001:db8::1]:4711"
					if end := strings.IndexByte(val, ']'); end > 0 {
						val = val[1:end]
					}
				}
				found = remote(val)
			}
			if !found.IsValid() {
				return nil
			}
			out = append(out, found)
		}
	}
	return out
}
