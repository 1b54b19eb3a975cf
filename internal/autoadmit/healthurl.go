package autoadmit

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// HealthURLs are the URL prefixes an event's auto.health_url may start with (serve
// --health-urls): the controller GETs that URL every second from the instance's network, so
// which URLs it may be is the operator's to say, not any admin key's (an operator-role key
// could otherwise have the instances request an internal address, cloud metadata included,
// and read its p95 back from the event's state). The zero value allows none.
type HealthURLs struct{ prefixes []*url.URL }

// ParseHealthURLs reads a comma-separated list of URL prefixes: each an absolute http or
// https URL with a host, a port (if any) of 1 to 65535, a path without "." or ".." segments,
// and no query, fragment or user info ("" = none). Errors name the first that is not.
func ParseHealthURLs(s string) (HealthURLs, error) {
	var h HealthURLs
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		u, err := url.Parse(p)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" ||
			u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.User != nil || !plain(u) {
			return HealthURLs{}, fmt.Errorf("%q is not an http(s) URL prefix with a host (a port, if any, of 1 to 65535), a path without . or .. segments, and no query, fragment or user", p)
		}
		h.prefixes = append(h.prefixes, u)
	}
	return h, nil
}

// Prefixes returns the list, as given.
func (h HealthURLs) Prefixes() []string {
	out := make([]string, len(h.prefixes))
	for i, u := range h.prefixes {
		out[i] = u.String()
	}
	return out
}

// ErrHealthURL: an event's auto.health_url that the operator's list does not allow.
var ErrHealthURL = errors.New("auto.health_url must start with one of the URLs the operator allows (serve --health-urls)")

// Allows reports whether raw starts with one of the prefixes: the same scheme and host (port
// included; the host's case aside), and its path equal to the prefix's or under it on a /
// boundary (https://shop.example/health allows …/health and …/health/x?q=1, not
// …/healthz, nor https://shop.example.evil.test/health), with no segment an origin could
// resolve elsewhere (…/health/../admin, …/health/%2e%2e/admin, …/health/..%2fadmin).
func (h HealthURLs) Allows(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.User != nil || !plain(u) {
		return false
	}
	for _, p := range h.prefixes {
		if u.Scheme != p.Scheme || !strings.EqualFold(u.Host, p.Host) {
			continue
		}
		path, pre := u.EscapedPath(), p.EscapedPath()
		if path == pre || pre == "" || pre == "/" ||
			(strings.HasPrefix(path, pre) && (strings.HasSuffix(pre, "/") || path[len(pre)] == '/')) {
			return true
		}
	}
	return false
}

// plain reports whether u's port, if written, is a number of 1 to 65535 in its plain form,
// and its path has no segment that an origin could read as another path: "." or ".." (also
// percent-encoded: /health/%2e%2e/admin), a "/" or "\" encoded in a segment, or a "\" at all
// (the client sends the path as written, and an origin that resolves it would serve what is
// outside the allowed prefix).
func plain(u *url.URL) bool {
	if port := u.Port(); port != "" || strings.HasSuffix(u.Host, ":") {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return false
		}
	}
	path := u.EscapedPath()
	if strings.Contains(path, "\\") {
		return false
	}
	for seg := range strings.SplitSeq(path, "/") {
		d, err := url.PathUnescape(seg)
		if err != nil || d == "." || d == ".." || strings.ContainsAny(d, "/\\") {
			return false
		}
	}
	return true
}
