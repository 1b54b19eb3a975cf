// Package pathrule is the waiting room's path rule (issue 20, item 2): the one reading of a request's path that
// every door that protects paths makes (the gate's reverse proxy and forward-auth check, package
// gateway, and the gate middleware's Site, package gate), so that no path an
// origin could route to a protected handler passes without an admission. Origins read paths
// differently: Tomcat and Spring drop ";…" path parameters (and resolve "..;" as ".."), Rails
// serves /checkout.json from the checkout action, IIS reads "\" as "/", drops trailing dots
// and spaces and ignores case, and some servers decode twice or fold Unicode forms. So:
//
// Refused (400 invalid_path), as no origin reads them one way: a path not starting with "/",
// control characters (%00, %09, %0A…), a backslash (raw or %5C), an encoded "/" (%2F), an
// encoded "?" or "#" (%3F, %23: a proxy that decodes would end the path there), a "%"
// escape left after decoding (double encoding: %252e), invalid UTF-8 (overlong forms such as
// %C0%AF), a dot segment carrying parameters ("..;"), a segment of only dots and spaces
// ("...", ". "), a segment some server reads as a dot segment ("..:x"), a ".." after a segment
// some server reads as empty ("/foo/;/../checkout", "/foo/.json/../checkout"), a character whose Unicode compatibility form adds one of / \ . ; : % or a
// space (fullwidth "／", "．"), and a segment that reads as a dot segment or as empty once
// the default-ignorable characters are dropped (hiddenStructure: ".\u200B.").
//
// Read, otherwise, twice: the cleaned path (decoded, dot segments and empty segments resolved,
// a trailing "/" kept), which is what the gate forwards to the origin, and the path as received
// when it differs (a proxy in front of the forward-auth check forwards it as it came, to an
// origin that may not resolve ".."). In each reading a segment is compared by its core: without
// its ";…" parameters, then without trailing dots and spaces; a protected segment "checkout"
// matches the cores "checkout", "checkout.json" and "checkout:x" (a suffix after "." or ":"),
// a protected file "pay.v2.php" also "pay.v2" and "pay" (MultiViews, try_files $uri $uri.php;
// segmentMatches), in any case, and a non-ASCII path after NFKC and case mapping, without
// default-ignorable characters ("ｃheckout", "checkou\u212At", "check\u00ADout": foldKey); and a
// Windows short name that may be a protected name's ("CHECKO~1": shortNameOf).
// Empty cores do not count ("/;x/checkout" is under /checkout), a segment that a server reads
// as empty counts both as itself and as not there ("/.x/checkout" is under /checkout), and a protected prefix's
// trailing "/" makes no difference (origins serve /checkout and /checkout/ alike).
//
// Two more readings come from the frameworks' routers: a front controller run as a script
// with PATH_INFO (PHP's Laravel, Symfony, Magento, WordPress through nginx's
// fastcgi_split_path_info or Apache's AcceptPathInfo; a CGI or FastCGI program; an IIS
// handler: scriptExt) routes what follows a script segment ("index.php", "app.PHP",
// "index.cgi", "dispatch.fcgi") as the path, so "/index.php/checkout",
// "/public/index.php/checkout" and "/cgi-bin/app.py/checkout" are also read as "/checkout", and,
// since a front controller installed in a directory routes under that directory, as the path
// without the script's segment ("/shop/index.php/vip" is also "/shop/vip"); and ASP.NET drops
// a cookieless-session segment ("(S(…))", "(A(…)F(…))"), so "/(S(x))/checkout" is read with
// that segment as empty.
//
// A path that starts with "//" is read twice more: as a network-path reference (RFC 3986
// 4.2), whose first segment is a host and the rest its path, cleaned and as received. An origin
// that resolves its request-target against a base URL reads it so: WHATWG's URL parser (Node's
// `new URL(req.url, base)`, skipping any number of slashes before the host), Go's url.Parse and
// Python's urlsplit, so that "//evil/checkout" is their "/checkout". The gate's proxy sends such
// a path cleaned ("/evil/checkout"), but a proxy in front of the forward-auth check sends it as
// it came.
//
// A path is protected when any reading is under a protected prefix, and bypassed by a bypass
// path only when every reading is under it (bypass prefixes compare bytes, case included).
//
// The query is read too (QueryUnder), for a request whose path is neither protected nor
// bypassed, on a site that does not switch it off (Site.QueryRoutes): front controllers route
// by it — WordPress's "/?pagename=checkout" and "/?rest_route=/wc/store/v1/checkout",
// WooCommerce's "/?wc-ajax=checkout", OpenCart's "/index.php?route=checkout/checkout",
// CodeIgniter's "/index.php?/checkout" — so a name or value that reads as a path under a
// protected prefix other than "/" (QueryReadings says how it is read), read from a directory of
// the request's path that is one of the prefix's (a front controller installed there), or a
// value that is an absolute path under a tail of one (a router mounted under the prefix's
// first segments), protects the request under that prefix's event (QueryUnder). A raw "#" in
// the query is refused (ReadQuery). This errs on the side of waiting: "/search?q=checkout" and
// "/login?next=/checkout" wait in the line of /checkout too (a bypass path exempts such a page:
// a bypassed path's query is not read).
package pathrule

import (
	"iter"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Path is a request's path as the gate reads it (Read).
type Path struct {
	clean string // decoded, cleaned: what the origin receives from the gate's proxy
	// reads are the path's readings: clean; the decoded path as received when it is not clean;
	// and for a path starting with "//", the same two of what follows its first segment (the
	// network-path reading); "" where there is none.
	reads [4]string
	// keys are the readings matched against protected prefixes: reads, folded (NFKC, upper
	// then lower case) when the path is not ASCII.
	keys [4]string
}

// Read applies the path rule to a request's path: decoded (URL.Path) and as sent
// when that is not the default encoding (URL.RawPath, else ""). It returns the readings, or
// the reason the path is refused (for invalidPath). It does not allocate for an ASCII path
// that is already clean.
func Read(decoded, raw string) (Path, string) {
	if decoded == "" || decoded[0] != '/' {
		return Path{}, "the path must start with /"
	}
	if hasEncodedSlash(raw) {
		return Path{}, "an encoded / (%2F) in the path"
	}
	ascii, dots := true, false // dots: a ".", ";" or " " (checkSegments has something to check)
	for i := 0; i < len(decoded); i++ {
		b := decoded[i]
		switch pathBytes[b] {
		case plain:
			continue
		case dotty:
			dots = true
			continue
		}
		switch {
		case b < 0x20 || b == 0x7f:
			return Path{}, "a control character in the path"
		case b == '\\':
			return Path{}, `a backslash (\ or %5C) in the path`
		case b == '?' || b == '#':
			return Path{}, "an encoded ? or # (%3F, %23) in the path"
		case b == '%' && i+2 < len(decoded) && isHex(decoded[i+1]) && isHex(decoded[i+2]):
			return Path{}, "a % escape left after decoding (double encoding) in the path"
		case b >= utf8.RuneSelf:
			ascii = false
		}
	}
	if !ascii {
		if !utf8.ValidString(decoded) {
			return Path{}, "invalid UTF-8 in the path"
		}
		if structure(norm.NFKC.String(decoded)) != structure(decoded) {
			return Path{}, "a Unicode character that servers may read as / \\ . ; : % or a space in the path"
		}
		if hiddenStructure(decoded) {
			return Path{}, "a segment that reads as a dot segment or as empty once the characters that render as nothing are dropped"
		}
	}
	p := Path{clean: cleanPath(decoded)}
	p.reads[0] = p.clean
	if p.clean != decoded {
		p.reads[1] = decoded
	}
	if len(decoded) > 1 && decoded[1] == '/' {
		rest := networkPathRest(decoded)
		if p.reads[2] = cleanPath(rest); p.reads[2] != rest {
			p.reads[3] = rest
		}
	}
	p.keys = p.reads
	if !dots && ascii {
		return p, "" // nothing to refuse nor to fold: the ordinary path
	}
	for i, k := range p.keys {
		if k == "" {
			continue
		}
		if why := checkSegments(k); why != "" {
			return Path{}, why
		}
		if !ascii {
			p.keys[i] = foldKey(k)
		}
	}
	return p, ""
}

// ReadQuery applies the path rule to a request's query as sent: it returns why the query
// is refused ("" when it is not): a raw "#", which no client sends (a fragment stays in the
// browser) and where servers end the query (nginx's $args, Node's and Python's URL parsers),
// so that "/?pagename=checkout#x" would be the origin's "/?pagename=checkout" and the gate's
// something else.
func ReadQuery(raw string) string {
	if strings.IndexByte(raw, '#') >= 0 {
		return "a # in the query (a fragment, which servers cut off)"
	}
	return ""
}

// networkPathRest is what follows the host of p read as a network-path reference ("//host/rest"
// with any number of leading slashes, as WHATWG's parser skips them): "/rest", or "/" when
// nothing follows the host.
func networkPathRest(p string) string {
	i := 0
	for i < len(p) && p[i] == '/' {
		i++
	}
	if j := strings.IndexByte(p[i:], '/'); j >= 0 {
		return p[i+j:]
	}
	return "/"
}

// The classes of a path's bytes for Read's scan.
const (
	plain   = iota // nothing to look at
	dotty          // ".", ";" or " ": segments to check
	special        // "%", "\", "?", "#", a control character or a non-ASCII byte
)

var pathBytes = func() (t [256]uint8) {
	for b := range 256 {
		switch {
		case b == '.' || b == ';' || b == ' ':
			t[b] = dotty
		case b < 0x20 || b >= 0x7f || b == '%' || b == '\\' || b == '?' || b == '#':
			t[b] = special
		}
	}
	return t
}()

// Under reports whether any reading of the path is under the protected prefix segs: a key's,
// or a front controller's reading of what follows a script segment of it; file: the prefix
// names a file (no trailing "/"), whose name matches without its extensions (segmentMatches).
func (p Path) Under(segs []string, file bool) bool { return anyUnder(p.keys[:], segs, file) }

// anyUnder reports whether one of keys ("" none) is under segs, or a front controller's reading
// of what follows a script segment of one. A key with more than maxScriptReadings script
// segments is taken as under segs: each reading costs a scan of the rest of the key, and a
// path of thousands of ".php" segments (each a script, and a segment a server reads as empty)
// made the gate spend seconds on one request; no server routes through so many. file is
// under's.
func anyUnder(keys []string, segs []string, file bool) bool {
	for _, k := range keys {
		if k == "" {
			continue
		}
		if under(k, segs, file) {
			return true
		}
		n := 0
		for rest, inDir := range afterScripts(k) {
			if n++; n > maxScriptReadings || under(rest, segs, file) || inDir != "" && under(inDir, segs, file) {
				return true
			}
		}
	}
	return false
}

// maxScriptReadings bounds the front controllers' readings of one key (anyUnder).
const maxScriptReadings = 16

// QueryReadings are the readings of a request's query (rawQuery, as sent) as paths, for
// QueryUnder: it is split at "&", ";" and "?" (servers differ on ";", and CodeIgniter routes
// "/index.php?/checkout?a=1" by what comes before the second "?"), and each value, and each
// name, is read as a path: decoded ("+" a space, a "%" escape that is not one left as it is)
// until it no longer changes (WordPress decodes a page name twice), at most three times, a
// backslash as "/", with a "/" put in front when it has none. Each gives three readings,
// folded as the path's keys are: cleaned, as decoded, and stripped as frameworks strip a
// route (stripRoute); and each decoding before the last is read stripped too, as WordPress
// strips what PHP decoded once (sanitize_text_field removes the "%XX" escapes left, so that
// WooCommerce's "?wc-ajax=check%2541out" is its "checkout").
//
// A value that reads as an absolute path ("/" first, once decoded) is a route, which a router
// mounted under a prefix takes from the query: WordPress serves /wp-json/wc/store/v1/checkout
// as /?rest_route=/wc/store/v1/checkout, under whatever REST prefix the site set. Its readings
// are also in routes, which QueryUnder matches against the tails of a protected prefix too.
//
// What a query costs to read is bounded (Query.over): past maxQueryValues values,
// maxQueryBytes of readings or maxScriptReadings script segments in all, a value of more than
// maxValueSegments segments, or a route longer than maxRouteLen once cleaned, the reading stops
// and the query is taken as under every prefix.
func QueryReadings(rawQuery string) (q Query) {
	n, size, scripts := 0, 0, 0
	add := func(k string) {
		q.all = append(q.all, k)
		size += len(k)
	}
	for part := range strings.FieldsFuncSeq(rawQuery, func(r rune) bool { return r == '&' || r == ';' || r == '?' }) {
		if n++; n > maxQueryValues {
			q.over = true
			return q
		}
		name, value, _ := strings.Cut(part, "=")
		for _, v := range [2]string{name, value} {
			i := len(q.all)
			for level := range 3 {
				d := lenientUnescape(v)
				if d == v {
					break
				}
				if level > 0 {
					add(foldKey(asRoute(stripRoute(v)))) // a decoding before the last, stripped
				}
				v = d
			}
			v = strings.ReplaceAll(strings.TrimSpace(v), "\\", "/")
			if v == "" {
				q.all = q.all[:i]
				continue
			}
			route := v[0] == '/'
			v = asRoute(v)
			if hiddenStructure(v) {
				q.over = true // a reading that folding would move: under every prefix
				return q
			}
			clean := cleanPath(v)
			add(foldKey(clean))
			add(foldKey(v))
			add(foldKey(stripRoute(v)))
			for range afterScripts(v) {
				scripts++
			}
			if size > maxQueryBytes || scripts > maxScriptReadings || strings.Count(v, "/") > maxValueSegments ||
				(route && len(clean) > maxRouteLen) {
				q.over = true
				return q
			}
			if route {
				q.routes = append(q.routes, q.all[i:]...)
			}
		}
	}
	return q
}

// asRoute is v with a "/" in front when it has none.
func asRoute(v string) string {
	if v == "" || v[0] != '/' {
		return "/" + v
	}
	return v
}

// Query are a query's readings as paths (QueryReadings): all of them, and those of the
// values that read as absolute paths (routes). over: the query was too much to read (more than
// maxQueryValues values, maxQueryBytes of readings, maxScriptReadings script segments, a value
// of more than maxValueSegments segments, or a route longer than maxRouteLen), and is taken as
// under every protected prefix but "/": each
// reading is one more scan for each prefix, its tails and directories, and an anonymous request
// of 32 KiB of query shaped for it cost the gate 0.3-2 s of CPU. A value is a part of the query
// between separators, its name and value together.
type Query struct {
	all, routes []string
	over        bool
}

// maxQueryValues, maxQueryBytes, maxValueSegments and maxRouteLen bound the query that
// QueryReadings reads: values, the readings' bytes, a value's segments ("/" in it, decoded:
// each is a place a prefix may start, since a segment some server reads as empty is skipped)
// and a route's length once cleaned (bytes). Real queries hold a few short values (a SAML
// request, among the longest, a few KiB), and a router's route is short.
const (
	maxQueryValues   = 64
	maxQueryBytes    = 32 << 10
	maxValueSegments = 16
	maxRouteLen      = 1024
)

// lenientUnescape decodes a query value's "%XX" escapes and "+", leaving a "%" that starts no
// escape as it is (url.QueryUnescape refuses the whole value then).
func lenientUnescape(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '+':
			b = append(b, ' ')
		case s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		default:
			b = append(b, s[i])
		}
	}
	return string(b)
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// stripRoute is a decoded query value as a framework strips a route (QueryReadings): "<…>"
// tags, "%XX" escapes and everything but ASCII letters, digits, "_" and "/" removed.
func stripRoute(v string) string {
	b := make([]byte, 0, len(v))
	var lower string     // v in lower case, made at the first "<"
	var unclosed [2]bool // no "</script", "</style" after the last one found
	noEnd := false
	elements := [2]string{"script", "style"}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '<':
			if lower == "" {
				lower = asciiLower(v) // byte for byte: its indexes are v's
			}
			// wp_strip_all_tags: a script or style element goes with its content. Each search
			// for its end starts where the last ended, and one that fails is not made again:
			// a value of many "<script" costs one scan, not one each.
			for e, el := range elements {
				if unclosed[e] || !strings.HasPrefix(lower[i+1:], el) {
					continue
				}
				if j := strings.Index(lower[i+1:], "</"+el); j >= 0 {
					i += 1 + j
				} else {
					unclosed[e] = true
				}
				break
			}
			if noEnd {
				continue
			}
			if j := strings.IndexByte(v[i:], '>'); j > 0 {
				i += j
			} else {
				noEnd = true // no ">" after here: no tag ends, and none is searched for again
			}
		case c == '%' && i+2 < len(v) && isHex(v[i+1]) && isHex(v[i+2]):
			i += 2
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '/':
			b = append(b, c)
		}
	}
	return string(b)
}

// asciiLower is s with A-Z in lower case, byte for byte.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// QueryUnder reports whether one of the query's readings (QueryReadings) is under the
// protected prefix segs, which is not "/" (every reading is under "/"), a front controller's
// reading of it included; or read from a directory of the request's path p that is a
// directory of segs (a front controller installed there: WordPress in /shop/ serves
// /shop/checkout as /shop/?pagename=checkout, and as /shop/any/page/?pagename=checkout); or a
// route's reading under a tail of segs (its first segments dropped: the prefix a router is
// mounted under, /wp-json of /wp-json/wc/store/v1/checkout).
func QueryUnder(q Query, p Path, segs []string) bool {
	if len(segs) == 0 {
		return false
	}
	if q.over {
		return true // too much to read: as under every prefix (Query)
	}
	// A value is a route, not a file's name: no stems (segmentMatches).
	if anyUnder(q.all, segs, false) {
		return true
	}
	for d := 1; d < len(segs); d++ {
		if p.inDir(segs[:d]) && anyUnder(q.all, segs[d:], false) {
			return true
		}
		if len(q.routes) > 0 && anyUnder(q.routes, segs[d:], false) {
			return true
		}
	}
	return false
}

// inDir reports whether a reading of the path is in the directory dir (segments), or below it.
func (p Path) inDir(dir []string) bool {
	for _, k := range p.keys {
		if k != "" && under(k, dir, false) {
			return true
		}
	}
	return false
}

// BypassedBy reports whether every reading of the path is under the bypass prefix b, a
// front controller's included ("/static/index.php/checkout" is not bypassed by /static/); a
// key with more than maxScriptReadings script segments is not bypassed.
func (p Path) BypassedBy(b string) bool {
	for _, k := range p.reads {
		if k == "" {
			continue
		}
		if !hasPrefix(k, b) {
			return false
		}
		n := 0
		for rest, inDir := range afterScripts(k) {
			// Past maxScriptReadings no reading is made (anyUnder takes the path as protected):
			// not bypassed. Each reading costs a copy of the path (helper-79: 2,307 script
			// segments took 69 ms a request).
			if n++; n > maxScriptReadings || !hasPrefix(rest, b) || inDir != "" && !hasPrefix(inDir, b) {
				return false
			}
		}
	}
	return true
}

// afterScripts yields, for each segment of p that a server may run as a script with the
// rest of the path as its PATH_INFO (isScript) and that has a rest, that rest ("/checkout" of
// "/index.php/checkout") and the path without the script's segment ("/shop/vip" of
// "/shop/index.php/vip": a front controller installed in /shop/ routes its PATH_INFO under its
// own directory, as Laravel, Symfony and WordPress do); the second is "" for a script at the
// root, whose two readings are the same. The second reading of a path of several scripts drops
// one script's segment at a time, not several.
func afterScripts(p string) iter.Seq2[string, string] {
	return func(yield func(rest, inDir string) bool) {
		for i := 0; i < len(p); {
			start := i
			s, j := segment(p, i)
			i = j
			if j >= len(p) || !isScript(s) {
				continue
			}
			inDir := ""
			if dir := strings.TrimRight(p[:start], "/"); dir != "" {
				inDir = dir + p[j:]
			}
			if !yield(p[j:], inDir) {
				return
			}
		}
	}
}

// isScript reports whether a segment names a script that a server may run with the rest of
// the path as its PATH_INFO: one of its extensions, in any case, is a script's (scriptExt),
// the last or not, since Apache's mod_mime maps a handler on any of a name's extensions
// ("index.php.en", "app.py.bak"); read by its core (without ";…" parameters and trailing dots
// and spaces, as IIS and Tomcat read it).
func isScript(s string) bool {
	if strings.IndexByte(s, '.') < 0 {
		return false
	}
	_, exts, ok := strings.Cut(coreOf(s), ".")
	if !ok {
		return false
	}
	for ext := range strings.SplitSeq(exts, ".") {
		if scriptExt(strings.ToLower(ext)) { // no copy unless ext has upper case
			return true
		}
	}
	return false
}

// scriptExt reports whether ext (lower case) is an extension that servers map to a script
// handler taking PATH_INFO (what follows the script's segment): PHP (.php, .php3 to .php8,
// .phtml, .phar, .pht, .phps: nginx's fastcgi_split_path_info, Apache's AcceptPathInfo), CGI,
// FastCGI, WSGI and PSGI programs (.cgi, .fcgi, .wsgi, .psgi, and .pl, .pm, .py, .rb, .sh, .tcl,
// .lua run as CGI: Apache's ScriptAlias and AddHandler cgi-script or wsgi-script, Rails's
// dispatch.fcgi, Flask's CGIHandler), IIS handlers (.exe and .dll as CGI and ISAPI, .asp,
// .aspx, .asmx, .ashx, .axd, .svc), Java servlets and frameworks mapped by extension (.jsp,
// .jspx, .do, .action) and ColdFusion (.cfm, .cfc). An origin with a script handler of another
// extension, or scripts without one (a ScriptAlias directory, Apache's MultiViews), has the gate
// protect those scripts' paths by name.
func scriptExt(ext string) bool {
	switch ext {
	case "php", "php3", "php4", "php5", "php6", "php7", "php8", "phtml", "phar", "pht", "phps",
		"cgi", "fcgi", "wsgi", "psgi", "pl", "pm", "py", "rb", "sh", "tcl", "lua",
		"exe", "dll", "asp", "aspx", "asmx", "ashx", "axd", "svc",
		"jsp", "jspx", "do", "action", "cfm", "cfc":
		return true
	}
	return false
}

// cookieless reports whether s is an ASP.NET cookieless-session segment, "(S(…))" or several
// such groups within one pair of parentheses ("(A(…)S(…)F(…))"), which ASP.NET drops from the
// path before routing it.
func cookieless(s string) bool {
	return len(s) >= 5 && s[0] == '(' && s[2] == '(' && s[len(s)-2] == ')' && s[len(s)-1] == ')' &&
		('A' <= s[1] && s[1] <= 'Z' || 'a' <= s[1] && s[1] <= 'z')
}

// PrefixSegments splits a protected prefix into the folded cores its paths must start with
// ("/" has none: everything is under it).
func PrefixSegments(prefix string) []string {
	var segs []string
	key := foldKey(prefix)
	for i := 0; i < len(key); {
		var core string
		core, i = nextCore(key, i)
		if core != "" {
			segs = append(segs, core)
		}
	}
	return segs
}

// under reports whether path p's segment cores start with segs (see segmentMatches). A
// segment that a server may read as empty (".json", ":x"; readsAs) counts both ways: as
// itself, and as not there ("/.x/checkout" is a server's /checkout). file: the last of segs
// is a file's name (segmentMatches).
func under(p string, segs []string, file bool) bool {
	if len(segs) == 0 {
		return true
	}
	for i := 0; i < len(p); {
		s, j := segment(p, i)
		i = j
		core := coreOf(s)
		if core == "" {
			continue
		}
		if segmentMatches(core, segs[0], file && len(segs) == 1) && under(p[i:], segs[1:], file) {
			return true
		}
		if empty, _ := readsAs(s); !empty {
			return false
		}
	}
	return false
}

// segmentMatches reports whether a path segment's core is the protected segment want, in any
// case, or want followed by "." or ":" and more (a format suffix, an NTFS stream); or, when
// want is a file's name (the last segment of a prefix without a trailing "/"), its name
// without one or more of its last extensions that are a script's or a page's (fileExt:
// "pay.v2" and "pay.v2.php" of "pay.v2.php.html"), which nginx's "try_files $uri $uri.php"
// and Apache's MultiViews serve as the file. Other dots are part of the name: a version, a
// date ("/tickets/2026.12.24" is not "/tickets/2026").
func segmentMatches(core, want string, file bool) bool {
	if len(core) >= len(want) && strings.EqualFold(core[:len(want)], want) &&
		(len(core) == len(want) || core[len(want)] == '.' || core[len(want)] == ':') {
		return true
	}
	if shortNameOf(core, want) {
		return true
	}
	for file && len(core) < len(want) {
		j := strings.LastIndexByte(want, '.')
		if j <= 0 || !fileExt(strings.ToLower(want[j+1:])) {
			return false
		}
		if want = want[:j]; strings.EqualFold(core, want) {
			return true
		}
	}
	return false
}

// shortNameOf reports whether core may be a Windows short (8.3) name of the long name want:
// one to six characters, "~", a number, and an extension of at most three characters
// ("CHECKO~1", "PAYV2~1.PHP"), whose characters before "~" begin want without the characters
// a short name leaves out (spaces, dots, "+,;=[]") and without want's last extension, in any
// case. IIS serves a file or a directory by its short name on a volume that keeps them, and
// no other request-target is such a name, so one is protected whenever it may be a protected
// name's (a name that has none, "checkout", is protected by its would-be prefix too).
func shortNameOf(core, want string) bool {
	t := strings.IndexByte(core, '~')
	if t < 1 || t > 6 {
		return false
	}
	j := t + 1
	for j < len(core) && core[j] >= '0' && core[j] <= '9' {
		j++
	}
	if j == t+1 || (j < len(core) && (core[j] != '.' || len(core)-j-1 > 3)) {
		return false
	}
	if k := strings.LastIndexByte(want, '.'); k > 0 {
		want = want[:k]
	}
	base := strings.Map(func(r rune) rune {
		if strings.ContainsRune(" .+,;=[]", r) {
			return -1
		}
		return r
	}, want)
	return len(base) >= t && strings.EqualFold(base[:t], core[:t])
}

// fileExt reports whether ext (lower case) is a script's (scriptExt) or a page's extension,
// which a server may serve without it (segmentMatches).
func fileExt(ext string) bool {
	switch ext {
	case "html", "htm", "shtml", "xhtml":
		return true
	}
	return scriptExt(ext)
}

// nextCore returns the core of the segment of p at or after index i (slashes skipped): the
// segment without its ";…" parameters, then without trailing dots and spaces; and the index
// after the segment.
func nextCore(p string, i int) (string, int) {
	s, j := segment(p, i)
	return coreOf(s), j
}

// coreOf is a segment's core: without its ";…" parameters, then without trailing dots and
// spaces.
func coreOf(s string) string {
	if k := strings.IndexByte(s, ';'); k >= 0 {
		s = s[:k]
	}
	return trimDotsSpaces(s)
}

// segment returns the segment of p at or after index i (slashes skipped), and the index after it.
func segment(p string, i int) (string, int) {
	for i < len(p) && p[i] == '/' {
		i++
	}
	j := i
	for j < len(p) && p[j] != '/' {
		j++
	}
	return p[i:j], j
}

// trimDotsSpaces is strings.TrimRight(s, ". "), without building a cutset each time.
func trimDotsSpaces(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '.' || s[len(s)-1] == ' ') {
		s = s[:len(s)-1]
	}
	return s
}

// checkSegments returns why a reading of a path is refused ("" when it is not): a segment
// that a server may read as a dot segment though it is not one ("..;x" and ".;x", which
// Tomcat resolves; "..:x", an NTFS stream of ".."), a segment of only dots and spaces other
// than "." and ".." ("...", ". ", which Windows servers may resolve), and a ".." after a
// segment that a server may read as empty (";x", ".json", ":x"): the server merges the empty
// segment away and its ".." takes the segment before, so "/foo/;/../checkout" is Tomcat's
// /checkout while the gate reads /foo/checkout.
func checkSegments(p string) string {
	emptied := false // a segment so far that some server reads as empty
	for i := 0; i < len(p); {
		var s string
		s, i = segment(p, i)
		switch s {
		case "", ".":
			continue
		case "..":
			if emptied {
				return "a .. after a segment that servers may read as empty (;x, .x, :x) in the path"
			}
			continue
		}
		if k := strings.IndexByte(s, ';'); k >= 0 && (s[:k] == "." || s[:k] == "..") {
			return "a dot segment with parameters (..;) in the path"
		}
		if trimDotsSpaces(s) == "" {
			return "a segment of only dots and spaces in the path"
		}
		empty, dot := readsAs(s)
		if dot {
			return "a segment that servers may read as . or .. (..:x) in the path"
		}
		emptied = emptied || empty
	}
	return ""
}

// readsAs reports whether a server may read the segment s (neither empty nor a dot segment)
// as an empty segment, or as "." or "..": an ASP.NET cookieless-session segment is empty;
// otherwise s read by each combination of the servers' ways of reading a segment (package
// comment): without ";…" parameters, without trailing dots and spaces, up to its first "." (a
// format suffix), up to its first ":" (an NTFS stream).
func readsAs(s string) (empty, dot bool) {
	if s != "" && s[0] == '(' && cookieless(s) {
		return true, false
	}
	if strings.IndexAny(s, ";.: ") < 0 {
		return false, false
	}
	for ways := range 16 {
		v := s
		if ways&1 != 0 {
			v, _, _ = strings.Cut(v, ";")
		}
		if ways&2 != 0 {
			v = trimDotsSpaces(v)
		}
		if ways&4 != 0 {
			v, _, _ = strings.Cut(v, ".")
		}
		if ways&8 != 0 {
			v, _, _ = strings.Cut(v, ":")
		}
		switch v {
		case "":
			empty = true
		case ".", "..":
			dot = true
		}
	}
	return empty, dot
}

// foldKey is what a path is matched as: NFKC, then upper and lower case (so that the Kelvin
// sign, the long s and the dotless i match k, s and i, as case-insensitive servers compare),
// without Unicode's default-ignorable characters (dropIgnorable), which render as nothing and
// which normalisers drop (UTS #46 maps the soft hyphen and the zero-width joiners to nothing),
// so that "check\u00ADout" and "check\u200Bout" are read as "checkout" too. An ASCII string
// is only lower-cased.
func foldKey(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return dropIgnorable(strings.ToLower(strings.ToUpper(norm.NFKC.String(s))))
		}
	}
	return strings.ToLower(s)
}

// dropIgnorable is s without Unicode's default-ignorable code points (format characters,
// variation selectors and the others of Other_Default_Ignorable_Code_Point: the soft hyphen,
// the zero-width space and joiners, the byte order mark, the Hangul fillers, the combining
// grapheme joiner), which render as nothing and which normalisers drop (UTS #46, NFKC_Casefold).
func dropIgnorable(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= utf8.RuneSelf && (unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Variation_Selector, r) ||
			unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r)) {
			return -1
		}
		return r
	}, s)
}

// hiddenStructure reports whether dropping s's default-ignorable code points changes how it
// is cleaned: a segment that then reads as a dot segment (".\u200B.") or as empty, which an
// origin that drops them resolves where the gate would not ("/x/.\u200B./checkout" is its
// "/checkout"), or one the segment rule refuses. The path is refused then, and a query
// reading taken as under every prefix.
func hiddenStructure(s string) bool {
	d := dropIgnorable(s)
	if d == s {
		return false
	}
	return checkSegments(d) != "" || cleanPath(d) != dropIgnorable(cleanPath(s))
}

// structure counts the characters that give a path its structure; a Unicode character whose
// compatibility form is one of them changes the count.
func structure(s string) (n [8]int) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '/':
			n[0]++
		case '\\':
			n[1]++
		case '.':
			n[2]++
		case ';':
			n[3]++
		case ':':
			n[4]++
		case '%':
			n[5]++
		case ' ':
			n[6]++
		default:
			if s[i] < 0x20 || s[i] == 0x7f {
				n[7]++
			}
		}
	}
	return n
}

func hasEncodedSlash(raw string) bool {
	for i := strings.IndexByte(raw, '%'); i >= 0 && i+2 < len(raw); {
		if raw[i+1] == '2' && (raw[i+2] == 'f' || raw[i+2] == 'F') {
			return true
		}
		next := strings.IndexByte(raw[i+1:], '%')
		if next < 0 {
			break
		}
		i += 1 + next
	}
	return false
}

func isHex(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F'
}
