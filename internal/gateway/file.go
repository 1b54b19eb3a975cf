package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/waitroom/waitroom/internal/clientaddr"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/pathrule"
)

// File is the gate file (`waitroom serve --gate FILE`), YAML or JSON (JSON is read as YAML):
//
//	listen: ":8000"                 # the gate's address; "" = forward-auth only (/v1/gate/check)
//	origin_timeout_s: 30            # the wait for an origin's response headers (s); then 504
//	trusted_proxies: [10.0.0.0/8]   # added to --trusted-proxies (every listener: package clientaddr)
//	sites:
//	  - host: shop.example.com      # "" or absent: any host
//	    origin: http://127.0.0.1:3000
//	    protect:
//	      - event: spring-sale
//	        paths: [/checkout, /api/cart]
//	        origin: http://127.0.0.1:3001   # optional: another origin for these paths
//	    bypass_paths: [/checkout/static/]
//	bypass:
//	  paths: [/static/, /healthz]
//	  cidrs: [192.0.2.0/24]
//	  header: Waitroom-Bypass        # the default name
//	  secret: "a long random string"
//
// Paths are prefixes on segment boundaries: /checkout matches /checkout and /checkout/pay, not
// /checkouts; a bypass prefix ending in "/" matches what is under it. They are matched by the
// path rule (package pathrule): protected prefixes as any origin could read the path (ignoring
// case, ";…" parameters, trailing dots and spaces, ".json"-like suffixes; a trailing "/" makes
// no difference), bypass prefixes byte for byte on the cleaned path, so /CHECKOUT and
// /checkout;x=1 are protected and /STATIC/ is not bypassed. Bypasses win over protection; the
// longest protected prefix wins.
//
// OriginTimeoutS (origin_timeout_s, seconds, fractions allowed; 0 or absent:
// DefaultOriginTimeout, at most 3600) bounds the gate's wait for an origin's response headers,
// not the body: a stream (server-sent events, a WebSocket, a download) lasts as long as it
// lasts once its headers came. Past it the visitor gets a 504 problem+json origin_timeout.
type File struct {
	Listen         string   `yaml:"listen" json:"listen"`
	OriginTimeoutS float64  `yaml:"origin_timeout_s" json:"origin_timeout_s"`
	TrustedProxies []string `yaml:"trusted_proxies" json:"trusted_proxies"`
	Sites          []Site   `yaml:"sites" json:"sites"`
	Bypass         Bypass   `yaml:"bypass" json:"bypass"`
}

// maxOriginTimeout is the largest origin_timeout_s accepted (s): beyond an hour it is a typo.
const maxOriginTimeout = 3600

// OriginTimeout is the wait for an origin's response headers: origin_timeout_s, or
// DefaultOriginTimeout.
func (f File) OriginTimeout() time.Duration {
	if f.OriginTimeoutS <= 0 {
		return DefaultOriginTimeout
	}
	return time.Duration(f.OriginTimeoutS * float64(time.Second))
}

// Site is one host of the gate file and the origin behind it.
type Site struct {
	Host        string   `yaml:"host" json:"host"`
	Origin      string   `yaml:"origin" json:"origin"`
	Protect     []Rule   `yaml:"protect" json:"protect"`
	BypassPaths []string `yaml:"bypass_paths" json:"bypass_paths"`
	// QueryRoutes: whether a query that reads as a protected path protects the request
	// (pathrule.QueryReadings; absent: true). false for a site whose origin routes by the path alone,
	// where values such as ?utm_campaign=checkout would otherwise wait in line.
	QueryRoutes *bool `yaml:"query_routes" json:"query_routes"`
}

// Rule protects path prefixes of a site with an event's waiting room.
type Rule struct {
	Event  string   `yaml:"event" json:"event"`
	Paths  []string `yaml:"paths" json:"paths"`
	Origin string   `yaml:"origin" json:"origin"`
}

// Bypass lists what passes straight through, on every site.
type Bypass struct {
	Paths  []string `yaml:"paths" json:"paths"`
	CIDRs  []string `yaml:"cidrs" json:"cidrs"`
	Header string   `yaml:"header" json:"header"` // defaults to Waitroom-Bypass
	Secret string   `yaml:"secret" json:"secret"` // "" = no bypass header
}

// Trusted returns the file's trusted_proxies. They are added to the service's trusted proxies
// (--trusted-proxies) for every listener: who a client is is decided by one rule (package
// clientaddr), whichever door the request comes through.
func (f File) Trusted() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(f.TrustedProxies))
	for _, c := range f.TrustedProxies {
		p, _ := parsePrefix(c) // checked by Parse
		out = append(out, p)
	}
	return out
}

// DefaultBypassHeader is the request header that carries Bypass.Secret.
const DefaultBypassHeader = "Waitroom-Bypass"

// minSecret is the shortest bypass secret accepted (bytes).
const minSecret = 16

// ReadFile reads and checks a gate file. Errors name the file and, where known, the line.
func ReadFile(name string) (File, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return File{}, err
	}
	return Parse(name, data)
}

// Parse reads a gate file's content (YAML or JSON); name prefixes error messages. Unknown
// fields, a wrong type, a missing origin or event, a path not starting with "/", a bad URL or
// CIDR, and a short bypass secret are errors, each with the line where the parser knows it.
func Parse(name string, data []byte) (File, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return File{}, fmt.Errorf("%s: empty gate file", name)
		}
		return File{}, fmt.Errorf("%s: %s", name, decodeError(err))
	}
	var root yaml.Node
	_ = yaml.Unmarshal(data, &root) // decoded above, so it parses
	lines := nodeLines{root: &root}
	if err := f.check(lines); err != nil {
		return File{}, fmt.Errorf("%s: %w", name, err)
	}
	return f, nil
}

// decodeError is the YAML decoder's error on one line, an unknown key named with the keys of
// its place ("line 4: unknown key "protekt" in a site (known: host, origin, …)") rather than
// with the Go type the decoder names.
func decodeError(err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return strings.TrimPrefix(err.Error(), "yaml: ")
	}
	msgs := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		msgs[i] = e
		m := unknownField.FindStringSubmatch(e)
		if m == nil {
			continue
		}
		if place, ok := fileMappings[m[3]]; ok {
			msgs[i] = fmt.Sprintf("%sunknown key %q %s (known: %s)", m[1], m[2], place.where, strings.Join(yamlKeys(place.typ), ", "))
		}
	}
	return strings.Join(msgs, "; ")
}

// unknownField is the decoder's message for a key a struct does not have (KnownFields).
var unknownField = regexp.MustCompile(`^(line \d+: )field (.+) not found in type gateway\.(\w+)$`)

// fileMappings are the gate file's mappings by the type the decoder names: where each stands.
var fileMappings = map[string]struct {
	where string
	typ   reflect.Type
}{
	"File":   {"at the top of the file", reflect.TypeFor[File]()},
	"Site":   {"in a site", reflect.TypeFor[Site]()},
	"Rule":   {"in a protect rule", reflect.TypeFor[Rule]()},
	"Bypass": {"in bypass", reflect.TypeFor[Bypass]()},
}

// yamlKeys lists the YAML keys of struct type t, in their order.
func yamlKeys(t reflect.Type) []string {
	keys := make([]string, 0, t.NumField())
	for f := range t.Fields() {
		if k, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); k != "" && k != "-" {
			keys = append(keys, k)
		}
	}
	return keys
}

// nodeLines finds the line of a value in the parsed document, for error messages.
type nodeLines struct{ root *yaml.Node }

// at returns "line N: " for the value at keys (strings for mapping keys, ints for sequence
// indexes), or "" when it cannot be found.
func (n nodeLines) at(keys ...any) string {
	cur := n.root
	if cur == nil || len(cur.Content) == 0 {
		return ""
	}
	cur = cur.Content[0]
	for _, k := range keys {
		var next *yaml.Node
		switch k := k.(type) {
		case string:
			if cur.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(cur.Content); i += 2 {
					if cur.Content[i].Value == k {
						next = cur.Content[i+1]
					}
				}
			}
		case int:
			if cur.Kind == yaml.SequenceNode && k < len(cur.Content) {
				next = cur.Content[k]
			}
		}
		if next == nil {
			break
		}
		cur = next
	}
	return fmt.Sprintf("line %d: ", cur.Line)
}

func (f *File) check(lines nodeLines) error {
	if len(f.Sites) == 0 {
		return fmt.Errorf("%sno sites: list at least one site with its origin and protected paths", lines.at())
	}
	if f.OriginTimeoutS < 0 || f.OriginTimeoutS > maxOriginTimeout {
		return fmt.Errorf("%sorigin_timeout_s: %v is not between 0 (the default, %d s) and %d seconds", lines.at("origin_timeout_s"),
			f.OriginTimeoutS, int(DefaultOriginTimeout/time.Second), maxOriginTimeout)
	}
	for _, c := range f.TrustedProxies {
		if _, err := parsePrefix(c); err != nil {
			return fmt.Errorf("%strusted_proxies: %v", lines.at("trusted_proxies"), err)
		}
	}
	for _, c := range f.Bypass.CIDRs {
		if _, err := parsePrefix(c); err != nil {
			return fmt.Errorf("%sbypass.cidrs: %v", lines.at("bypass", "cidrs"), err)
		}
	}
	for _, p := range f.Bypass.Paths {
		if err := pathrule.CheckBypass(p); err != nil {
			return fmt.Errorf("%sbypass.paths: %v", lines.at("bypass", "paths"), err)
		}
	}
	if f.Bypass.Secret != "" && len(f.Bypass.Secret) < minSecret {
		return fmt.Errorf("%sbypass.secret: at least %d characters (a long random string)", lines.at("bypass", "secret"), minSecret)
	}
	hosts := map[string]bool{}
	protected := 0
	for i := range f.Sites {
		s := &f.Sites[i]
		h := strings.TrimSpace(s.Host)
		s.Host = ""
		if h != "" {
			rh, ok := readHost(h)
			bracketed := strings.HasPrefix(h, "[")
			if port := bracketed && !strings.HasSuffix(h, "]") || !bracketed && strings.Contains(h, ":"); !ok || port {
				return fmt.Errorf("%ssites[%d].host: %q is not a host name or [IPv6 address] without a port (the gate matches hosts whatever their port)",
					lines.at("sites", i, "host"), i, h)
			}
			s.Host = rh
		}
		if hosts[s.Host] {
			return fmt.Errorf("%ssites[%d]: host %q is listed twice", lines.at("sites", i), i, s.Host)
		}
		hosts[s.Host] = true
		if s.Origin != "" || f.Listen != "" {
			if err := checkOrigin(s.Origin); err != nil {
				return fmt.Errorf("%ssites[%d].origin: %v", lines.at("sites", i, "origin"), i, err)
			}
		}
		for _, p := range s.BypassPaths {
			if err := pathrule.CheckBypass(p); err != nil {
				return fmt.Errorf("%ssites[%d].bypass_paths: %v", lines.at("sites", i, "bypass_paths"), i, err)
			}
		}
		// A prefix protected twice in one site (as the path rule matches it: /Checkout and
		// /checkout/ are /checkout) would go to whichever rule comes first: a mistake, not a
		// choice the file can express.
		seen := map[string]int{}
		for j, r := range s.Protect {
			at := func(k ...any) string { return lines.at(append([]any{"sites", i, "protect", j}, k...)...) }
			if !event.ValidID(r.Event) {
				return fmt.Errorf("%ssites[%d].protect[%d].event: %q is not an event id (%s)", at("event"), i, j, r.Event, event.IDRule)
			}
			if len(r.Paths) == 0 {
				return fmt.Errorf("%ssites[%d].protect[%d].paths: list at least one path prefix", at(), i, j)
			}
			for _, p := range r.Paths {
				if err := pathrule.CheckProtected(p); err != nil {
					return fmt.Errorf("%ssites[%d].protect[%d].paths: %v", at("paths"), i, j, err)
				}
				if wp := waitroomPath(p); wp != "" {
					return fmt.Errorf("%ssites[%d].protect[%d].paths: %q can never be protected: it is under %s, one of the waiting room's own paths, which the gate serves itself and never passes to the origin",
						at("paths"), i, j, p, wp)
				}
				key := strings.Join(pathrule.PrefixSegments(p), "/")
				if k, dup := seen[key]; dup {
					return fmt.Errorf("%ssites[%d].protect[%d].paths: %q is protected already by sites[%d].protect[%d] (a path has one event and one origin)",
						at("paths"), i, j, p, i, k)
				}
				seen[key] = j
			}
			if r.Origin != "" {
				if err := checkOrigin(r.Origin); err != nil {
					return fmt.Errorf("%ssites[%d].protect[%d].origin: %v", at("origin"), i, j, err)
				}
			}
			protected++
		}
	}
	if protected == 0 {
		return fmt.Errorf("%sno protected paths: give a site a protect rule (event and paths)", lines.at("sites"))
	}
	return nil
}

// parsePrefix reads a range of the gate file (trusted_proxies, bypass.cidrs) as the client
// addresses it is matched against are read: package clientaddr's rule.
func parsePrefix(s string) (netip.Prefix, error) { return clientaddr.ParseCIDR(s) }

func checkOrigin(s string) error {
	if s == "" {
		return errors.New("required: the URL of the site behind the gate (http://host:port)")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL with a host", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: an origin has no query or fragment", s)
	}
	return nil
}
