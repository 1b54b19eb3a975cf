package pathrule

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// Clean is the path decoded and cleaned (dot segments and empty segments resolved, a trailing
// "/" kept): what the gate's proxy forwards to the origin.
func (p Path) Clean() string { return p.clean }

// Refusal is the detail of the 400 invalid_path answer to a path Read or ReadQuery refuses for
// the reason why, the same at every door.
func Refusal(why string) string {
	return why + ": the waiting room refuses paths that servers read in different ways"
}

// CheckBypass checks a bypass prefix (or another prefix compared as bytes): it starts with "/"
// and is clean (CleanPrefix returns it as it is). Errors name the prefix and what to write.
func CheckBypass(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%q must start with /", p)
	}
	if c := cleanPath(p); c != p {
		return fmt.Errorf("%q is not clean (write %q)", p, c)
	}
	return nil
}

// CheckProtected checks a protected prefix: clean, and one the path rule can match (no
// character it refuses, no ";" nor a segment ending in "." or " ", which it reads past).
func CheckProtected(p string) error {
	if err := CheckBypass(p); err != nil {
		return err
	}
	if _, why := Read(p, ""); why != "" {
		return fmt.Errorf("%q can never match: %s", p, why)
	}
	for _, seg := range strings.Split(p, "/") {
		if strings.Contains(seg, ";") || strings.TrimRight(seg, ". ") != seg {
			return fmt.Errorf("%q can never match: paths are matched without \";…\" parameters and trailing dots and spaces", p)
		}
	}
	return nil
}

// cleanPath is path.Clean keeping a trailing slash ("/a/b/" stays "/a/b/"). A clean path is
// returned as it is, without allocating.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		if len(p) == len(c)+1 && p[:len(c)] == c {
			return p
		}
		c += "/"
	}
	return c
}

// hasPrefix reports whether p is under prefix on a segment boundary.
func hasPrefix(p, prefix string) bool {
	if !strings.HasPrefix(p, prefix) {
		return false
	}
	return len(p) == len(prefix) || strings.HasSuffix(prefix, "/") || p[len(prefix)] == '/'
}

// Prefix is a protected path prefix, compiled for Match (CheckProtected first).
type Prefix struct {
	segs []string // its segments, folded (PrefixSegments)
	file bool     // it names a file: no trailing "/" (segmentMatches)
}

// NewPrefix compiles the protected prefix p ("/checkout", "/api/cart/", "/").
func NewPrefix(p string) Prefix {
	return Prefix{segs: PrefixSegments(p), file: !strings.HasSuffix(p, "/")}
}

// Each calls yield, for each reading of the path p (Path.Under's: each of its keys, and, for
// each script segment of one, what follows it and the key without it: afterScripts), with the
// index in protect of the first prefix that the reading falls under, skipping readings under
// none; then, when queryRoutes, the same for each
// reading of the query (QueryUnder's, one value at a time), whether or not the path's fell
// under one: "/checkout?pagename=vip" is /vip to a WordPress origin, whose query overrides its
// path. A reading also under a later prefix that does not lead where the first does (same
// reports whether two prefixes of protect do) and is not above it segment by segment (/shop
// above /shop/vip) makes it yield -1: which one it is would be a guess (/pay.php, which also
// protects /pay/…, beside /pay/). So does a reading too long to take one by one, which Match
// takes as under every prefix (a path of more than maxScriptReadings script segments,
// Query.over). It stops when yield returns false. Order protect deepest first (SortDeepest).
//
// Match answers the first prefix that any reading falls under. Where the prefixes lead to
// different places (a gate file's events), the caller checks with Each that every reading
// leads to the same one: "/checkout/../vip" reads as under /checkout as sent and under /vip
// resolved, and must not pass as /checkout's while an origin serves /vip.
func Each(p Path, rawQuery string, protect []Prefix, queryRoutes bool, same func(i, j int) bool, yield func(i int) bool) {
	reading := func(under func(pr Prefix) bool) bool {
		first := -1
		for i, pr := range protect {
			if !under(pr) {
				continue
			}
			if first < 0 {
				first = i
			} else if !same(first, i) && !pr.above(protect[first]) {
				yield(-1)
				return false
			}
		}
		return first < 0 || yield(first)
	}
	for _, k := range p.keys {
		if k == "" {
			continue
		}
		if !reading(func(pr Prefix) bool { return under(k, pr.segs, pr.file) }) {
			return
		}
		n := 0
		for rest, inDir := range afterScripts(k) {
			if n++; n > maxScriptReadings {
				yield(-1)
				return
			}
			if !reading(func(pr Prefix) bool { return under(rest, pr.segs, pr.file) }) {
				return
			}
			if inDir != "" && !reading(func(pr Prefix) bool { return under(inDir, pr.segs, pr.file) }) {
				return
			}
		}
	}
	if rawQuery == "" || !queryRoutes {
		return
	}
	q := QueryReadings(rawQuery)
	if q.over {
		yield(-1)
		return
	}
	for _, v := range q.all {
		one := Query{all: []string{v}}
		if slices.Contains(q.routes, v) {
			one.routes = one.all
		}
		if !reading(func(pr Prefix) bool { return QueryUnder(one, p, pr.segs) }) {
			return
		}
	}
}

// above reports whether a is above b segment by segment: b's segments start with all of a's,
// and more (/shop above /shop/vip).
func (a Prefix) above(b Prefix) bool {
	return len(a.segs) < len(b.segs) && slices.Equal(a.segs, b.segs[:len(a.segs)])
}

// SortDeepest orders protect, and the same indexes of along, deepest first: more segments
// first, then (as they come) the order they had. Each's order, so that a reading's first
// prefix is its most specific one: a fullwidth /ｓｈｏｐ/x is longer than /shop/x/y, not deeper.
func SortDeepest(protect []Prefix, swap func(i, j int)) {
	for i := 1; i < len(protect); i++ {
		for j := i; j > 0 && len(protect[j].segs) > len(protect[j-1].segs); j-- {
			protect[j], protect[j-1] = protect[j-1], protect[j]
			swap(j, j-1)
		}
	}
}

// Match returns the index in protect of the first prefix that a reading of the path p falls
// under (Path.Under), or else, when queryRoutes, the first that a reading of the request's
// query (rawQuery as sent) falls under (QueryReadings, QueryUnder; byQuery true); -1 when none.
// Order protect longest first, so that the most specific prefix is found first. Bypass paths
// are the caller's to apply first (Path.BypassedBy).
func Match(p Path, rawQuery string, protect []Prefix, queryRoutes bool) (i int, byQuery bool) {
	for i, pr := range protect {
		if p.Under(pr.segs, pr.file) {
			return i, false
		}
	}
	if rawQuery == "" || !queryRoutes {
		return -1, false
	}
	readings := QueryReadings(rawQuery)
	for i, pr := range protect {
		if QueryUnder(readings, p, pr.segs) {
			return i, true
		}
	}
	return -1, false
}
