package gateway

import (
	"net/http"
	"slices"
	"strings"
)

// Headers is every X-Waitroom-* name Waitroom defines: the ones the gate and the check set. A
// proxy in front of the forward-auth check clears each of them on the requests it passes to the
// origin, unless the check set it (deploy/nginx/waitroom.conf does; TestNginx sends each one).
var Headers = []string{HeaderEvent, HeaderTicket, HeaderNumber, HeaderAdmittedUntil, HeaderLocation, HeaderProblem,
	HeaderPosition, HeaderWaiting, HeaderETA}

// ClientHeaders are the client's own headers that an origin could read as the gate's or as a
// proxy's (issue 20, item 14): the gate's proxy removes them from every request before the
// origin sees it, in whatever case and with "_" in place of "-" (CGI and WSGI servers map
// X_Real_IP and X-Real-IP alike onto HTTP_X_REAL_IP), besides every X-Waitroom-* and
// X-Forwarded-* name (clientOnlyPrefixes; the gate sets X-Forwarded-For, -Host and -Proto
// itself) and the gate file's bypass header. A proxy in front of the forward-auth check must
// clear (or set) each of them on what it passes to the origin: nginx cannot clear by pattern,
// so the X-Forwarded-* names that frameworks read are listed too, and the bypass header by its
// default name (deploy/nginx/waitroom.conf clears each; TestNginx sends them all; a gate file
// that renames the bypass header needs that name cleared too). They are:
//   - the client's address as other proxies pass it: X-Real-IP, Forwarded, the client-address
//     headers of CDNs and load balancers that frameworks read (X-Client-IP, True-Client-IP,
//     X-Cluster-Client-IP, CF-Connecting-IP, Fastly-Client-IP) and the older names that PHP
//     code and Rails still read (Client-IP, X-Forwarded, Forwarded-For, X-Originating-IP,
//     X-Remote-IP, X-Remote-Addr, X-ProxyUser-Ip);
//   - the scheme as some read it (Front-End-Https, CodeIgniter's; X-Url-Scheme, X-Scheme), the
//     host (X-Host, X-Original-Host), the original path as IIS and PHP frameworks read it
//     (X-Original-URL, X-Rewrite-URL, X-Original-URI, X-Original-Path, Envoy's
//     X-Envoy-Original-Path), and the prefix a WSGI app behind a proxy strips from the path
//     before it routes (X-Script-Name: the widely copied Flask "ReverseProxied" recipe, so
//     that "/foo/checkout" with "X-Script-Name: /foo" is its /checkout);
//   - more names for the client's address, which Java's "getClientIp" snippets and cloud
//     platforms' SDKs read (Proxy-Client-IP, WL-Proxy-Client-IP, X-Original-Forwarded-For,
//     X-Envoy-External-Address, CloudFront-Viewer-Address, X-Azure-ClientIP,
//     X-Appengine-User-Ip); the user as an authenticating proxy in front names it (Remote-User,
//     X-Remote-User, oauth2-proxy's X-Auth-Request-*, X-Webauth-User); and Next.js's internal
//     headers, which it trusted from clients (X-Middleware-Subrequest skipped its middleware:
//     CVE-2025-29927; X-Invoke-Path, X-Invoke-Query, X-Matched-Path, X-Now-Route-Matches);
//   - the origin's Waitroom-Command, and the bypass header;
//   - the X-Forwarded-* names: Rack reads X-Forwarded-Ssl and -Scheme, others -Protocol and
//     -Path, and an authenticating proxy in front (oauth2-proxy, Envoy) names the user in
//     -User, -Email, -Groups, -Client-Cert…, which an origin behind one trusts.
var ClientHeaders = []string{
	"X-Real-IP", "Forwarded", "X-Client-IP", "True-Client-IP", "X-Cluster-Client-IP", "CF-Connecting-IP",
	"Fastly-Client-IP", "Client-IP", "X-Forwarded", "Forwarded-For", "X-Originating-IP", "X-Remote-IP", "X-Remote-Addr",
	"X-ProxyUser-Ip", "Front-End-Https", "X-Url-Scheme", "X-Scheme", "X-Host", "X-Original-Host",
	"X-Original-URL", "X-Rewrite-URL", "X-Original-URI", "X-Original-Path", "X-Envoy-Original-Path", "X-Script-Name",
	"Proxy-Client-IP", "WL-Proxy-Client-IP", "X-Original-Forwarded-For", "X-Envoy-External-Address",
	"CloudFront-Viewer-Address", "X-Azure-ClientIP", "X-Appengine-User-Ip",
	"Remote-User", "X-Remote-User", "X-Auth-Request-User", "X-Auth-Request-Email", "X-Auth-Request-Preferred-Username",
	"X-Auth-Request-Groups", "X-Auth-Request-Access-Token", "X-Webauth-User",
	"X-Middleware-Subrequest", "X-Invoke-Path", "X-Invoke-Query", "X-Matched-Path", "X-Now-Route-Matches",
	"Waitroom-Command", DefaultBypassHeader,
	"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port", "X-Forwarded-Prefix",
	"X-Forwarded-Server", "X-Forwarded-Uri", "X-Forwarded-Method", "X-Forwarded-Ssl", "X-Forwarded-Scheme",
	"X-Forwarded-Protocol", "X-Forwarded-Path", "X-Forwarded-Url", "X-Forwarded-Context",
	"X-Forwarded-User", "X-Forwarded-Email", "X-Forwarded-Groups", "X-Forwarded-Preferred-Username",
	"X-Forwarded-Access-Token", "X-Forwarded-Client-Cert", "X-Forwarded-Tls-Client-Cert", "X-Forwarded-By",
}

var (
	clientOnlyPrefixes = []string{"x-waitroom-", "x-forwarded-"}
	// clientOnlyNames are ClientHeaders in lower case, but those clientOnlyPrefixes cover.
	clientOnlyNames = func() (out []string) {
		for _, h := range ClientHeaders {
			l := strings.ToLower(h)
			if !strings.HasPrefix(l, clientOnlyPrefixes[0]) && !strings.HasPrefix(l, clientOnlyPrefixes[1]) {
				out = append(out, l)
			}
		}
		return out
	}()
	// clientOnlyFirst holds the first bytes (lower case) of clientOnlyNames and
	// clientOnlyPrefixes: gateHeader's quick test.
	clientOnlyFirst = func() (t [256]bool) {
		for _, n := range append(slices.Clone(clientOnlyNames), clientOnlyPrefixes...) {
			t[n[0]] = true
		}
		return t
	}()
)

// gateHeader reports whether a request header's name is one an origin could read as one of the
// gate's (see clientOnlyNames). It does not allocate.
func (rt *routes) gateHeader(name string) bool {
	if name == "" {
		return false
	}
	if c := name[0] | 0x20; !clientOnlyFirst[c] && c != rt.headerKey[0] {
		return false // most headers: Accept, User-Agent…
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
// proxy in front of the check cannot be relied on to clear ("" when there is none): any name
// but one Waitroom defines (Headers), written as defined, in any case. So a name written with
// a character other than a letter, a digit or "-" is refused ("_", ".", "~": PHP reads each as
// "_", so X.Waitroom.Ticket is its HTTP_X_WAITROOM_TICKET, and a FastCGI server maps only "-"
// to "_"). nginx, for one, can only clear the names it is given and drops such names by
// default; the check refuses the others, so that none reaches the origin.
func forgedHeader(h http.Header) string {
	const ns = "x-waitroom-"
	for k := range h {
		if len(k) >= len(ns) && nameEqual(k[:len(ns)], ns) &&
			!slices.ContainsFunc(Headers, func(d string) bool { return strings.EqualFold(k, d) }) {
			return k
		}
	}
	return ""
}

// nameEqual reports whether a header name is want (lower case, with "-"), ignoring case and
// reading every character but a letter or a digit as "-": CGI, WSGI and PHP read X_Real_IP
// as X-Real-IP, and PHP also X.Real.IP (it turns "." and " " into "_" in every name it
// registers); a header name's other characters ("~", "!", "*"…) are read as "-" too.
func nameEqual(name, want string) bool {
	if len(name) != len(want) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		default:
			c = '-'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}
