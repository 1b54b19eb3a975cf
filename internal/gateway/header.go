package gateway

import (
	"net/http"
	"strings"
)

// Headers is every X-Waitroom-* name Waitroom defines: the ones the gate and the check set. A
// proxy in front of the forward-auth check clears each of them on the requests it passes to the
// origin, unless the check set it (deploy/nginx/waitroom.conf does; TestNginx sends each one).
var Headers = []string{HeaderEvent, HeaderTicket, HeaderNumber, HeaderAdmittedUntil, HeaderLocation, HeaderProblem}

// The client headers an origin could read as the gate's (issue 20, item 14), removed by the
// gate's proxy before the origin sees a request, in whatever case, and with "_" in place of
// "-" (CGI and WSGI servers map X_Waitroom_Ticket and X-Waitroom-Ticket alike onto
// HTTP_X_WAITROOM_TICKET): every X-Waitroom-* and X-Forwarded-* name (the gate sets
// X-Forwarded-For, -Host and -Proto itself), the client's address as other proxies pass it
// (X-Real-IP, Forwarded, and the client-address headers of CDNs and load balancers that
// frameworks read: X-Client-IP, True-Client-IP, X-Cluster-Client-IP, CF-Connecting-IP,
// Fastly-Client-IP, and the older names that PHP code and Rails still read: Client-IP,
// X-Forwarded, Forwarded-For, X-Originating-IP, X-Remote-IP, X-Remote-Addr, X-ProxyUser-Ip), the
// scheme as some read it (Front-End-Https, CodeIgniter's; X-Url-Scheme, X-Scheme), the host as
// some read it (X-Host, X-Original-Host), the original path as IIS and PHP frameworks read it
// (X-Original-URL, X-Rewrite-URL, X-Original-URI), the origin's Waitroom-Command and the bypass
// header.
var (
	clientOnlyPrefixes = []string{"x-waitroom-", "x-forwarded-"}
	clientOnlyNames    = []string{"x-real-ip", "forwarded", "x-client-ip", "true-client-ip", "x-cluster-client-ip",
		"cf-connecting-ip", "fastly-client-ip", "client-ip", "x-forwarded", "forwarded-for", "x-originating-ip",
		"x-remote-ip", "x-remote-addr", "x-proxyuser-ip", "front-end-https", "x-url-scheme", "x-scheme",
		"x-host", "x-original-host", "x-original-url", "x-rewrite-url", "x-original-uri", "waitroom-command"}
)

// ClientHeaders are the headers of a client's request that a proxy in front of the forward-auth
// check must clear (or set itself) on what it passes to the origin, as the gate's own proxy
// removes them: the names above (clientOnlyNames), the X-Forwarded-* names that frameworks read
// (the gate's proxy removes every X-Forwarded-* name; nginx cannot clear by pattern, so each is
// listed: Rack reads X-Forwarded-Ssl and -Scheme, others -Protocol and -Path), and the bypass
// header by its default name. deploy/nginx/waitroom.conf clears or sets each one (TestNginx
// sends them all); a gate file that renames the bypass header needs that name cleared too.
var ClientHeaders = []string{
	"X-Real-IP", "Forwarded", "X-Client-IP", "True-Client-IP", "X-Cluster-Client-IP", "CF-Connecting-IP",
	"Fastly-Client-IP", "Client-IP", "X-Forwarded", "Forwarded-For", "X-Originating-IP", "X-Remote-IP", "X-Remote-Addr",
	"X-Host", "X-Original-URL", "X-Rewrite-URL", "X-Original-URI", "Waitroom-Command", DefaultBypassHeader,
	"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port", "X-Forwarded-Prefix",
	"X-Forwarded-Server", "X-Forwarded-Uri", "X-Forwarded-Method", "X-Forwarded-Ssl", "X-Forwarded-Scheme",
	"X-Forwarded-Protocol", "X-Forwarded-Path",
	"X-ProxyUser-Ip", "Front-End-Https", "X-Url-Scheme", "X-Scheme", "X-Original-Host",
	// Who the user is, as an authenticating proxy in front says it (oauth2-proxy, Envoy):
	// names an origin behind one trusts.
	"X-Forwarded-User", "X-Forwarded-Email", "X-Forwarded-Groups", "X-Forwarded-Preferred-Username",
	"X-Forwarded-Access-Token", "X-Forwarded-Client-Cert", "X-Forwarded-Tls-Client-Cert", "X-Forwarded-By",
}

// gateHeader reports whether a request header's name is one an origin could read as one of the
// gate's (see clientOnlyNames). It does not allocate.
func (rt *routes) gateHeader(name string) bool {
	if name == "" {
		return false
	}
	if c := name[0] | 0x20; c != 'x' && c != 'f' && c != 'w' && c != 't' && c != 'c' && c != rt.headerKey[0] {
		return false // most headers: Accept, Cookie, User-Agent…
	}
	for _, p := range clientOnlyPrefixes {
		if len(name) >= len(p) && nameEqual(name[:len(p)], p) {
			return true
		}
	}
	for _, n := range clientOnlyNames {
		if nameEqual(name, n) {
			return true
		}
	}
	return nameEqual(name, rt.headerKey)
}

// forgedHeader returns the first request header in Waitroom's X-Waitroom-* namespace that a
// proxy in front of the check cannot be relied on to clear ("" when there is none): a name
// Waitroom does not define (Headers), or one written with "_". nginx, for one, can only clear
// the names it is given and drops names with "_" by default; the check refuses the others, so
// that none reaches the origin.
func forgedHeader(h http.Header) string {
	const ns = "x-waitroom-"
	for k := range h {
		if len(k) < len(ns) || !nameEqual(k[:len(ns)], ns) {
			continue
		}
		if strings.IndexByte(k, '_') < 0 {
			defined := false
			for _, d := range Headers {
				defined = defined || strings.EqualFold(k, d)
			}
			if defined {
				continue
			}
		}
		return k
	}
	return ""
}

// nameEqual reports whether a header name is want (lower case, with "-"), ignoring case and
// reading "_" as "-".
func nameEqual(name, want string) bool {
	if len(name) != len(want) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case c == '_':
			c = '-'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}
