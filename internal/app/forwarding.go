package app

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// forwardingNotice notices the most common mistake of a deployment behind a load balancer:
// requests carry X-Forwarded-For (or Forwarded) from a peer that is not in --trusted-proxies,
// so every client behind it counts as one client for the limits — the crowd shares one bucket
// of joins, and ten wrong admin keys from anyone lock every admin out. It says so once per peer
// in the log, counts such requests on /metrics, and lists the peers in the warnings the
// console shows (the instance's heartbeat).
type forwardingNotice struct {
	log     *slog.Logger
	counter prometheus.Counter

	mu    sync.Mutex
	peers map[netip.Addr]string // peer -> the header it sent; at most maxNoticedPeers
}

// maxNoticedPeers bounds what the notice remembers: a few load balancers, not every client
// that sends the header itself.
const maxNoticedPeers = 8

func (n *forwardingNotice) seen(peer netip.Addr, header string) {
	n.counter.Inc()
	n.mu.Lock()
	_, known := n.peers[peer]
	added := !known && len(n.peers) < maxNoticedPeers
	if added {
		n.peers[peer] = header
	}
	n.mu.Unlock()
	if added {
		n.log.Warn("requests carry a forwarding header from a peer that is not a trusted proxy: every client behind it counts as one for the limits; if it is your load balancer, add it to --trusted-proxies (WAITROOM_TRUSTED_PROXIES)",
			"peer", peer.String(), "header", header)
	}
}

// warnings are the console's lines about the peers seen.
func (n *forwardingNotice) warnings() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.peers))
	for peer, header := range n.peers {
		out = append(out, fmt.Sprintf("Requests from %s carry %s, but %s is not in --trusted-proxies (WAITROOM_TRUSTED_PROXIES): "+
			"every client behind it counts as one for the limits. If it is your load balancer, add it there.", peer, header, peer))
	}
	sort.Strings(out)
	return out
}

// originNotice notices the other common mistake behind a proxy: browsers' joins and push
// connections refused (403 origin_not_allowed) because their Origin is not the Host the
// instance sees — a proxy that passes on another Host than the visitor wrote (nginx's $host
// drops the port) refuses every page — or a page of a site not in --allowed-origins. Anyone
// can send refused requests with any Origin and Host, so this is best effort, made hard to
// drown: refusals are counted per {origin, host} for ten minutes in a bounded table
// (Space-Saving: a pair refused often stays whatever floods it); "near misses" — an Origin of
// the Host's own name on another port or scheme, a proxy's signature — rank before the rest;
// the log says a line a minute at most, naming the top pairs of the window, and the console's
// warnings list up to originMaxWarnings of them.
type originNotice struct {
	log *slog.Logger
	now func() time.Time

	mu     sync.Mutex
	logged time.Time         // the last line
	since  int               // refusals since it
	window time.Time         // the start of the counts
	counts map[[2]string]int // {origin, host} -> refusals (at most originMaxPairs pairs)
}

const (
	originLogEvery    = time.Minute
	originWindow      = 10 * time.Minute
	originMaxPairs    = 64  // pairs counted in a window
	originMaxText     = 200 // bytes of an Origin or Host kept
	originMaxWarnings = 5
	originLogPairs    = 3 // pairs a log line names
)

func newOriginNotice(log *slog.Logger, now func() time.Time) *originNotice {
	return &originNotice{log: log, now: now, counts: map[[2]string]int{}}
}

func (n *originNotice) refused(origin, host string) {
	key := [2]string{clip(origin), clip(host)}
	now := n.now()
	n.mu.Lock()
	if now.Sub(n.window) >= originWindow {
		n.window = now
		clear(n.counts)
	}
	if _, ok := n.counts[key]; ok || len(n.counts) < originMaxPairs {
		n.counts[key]++
	} else {
		// Full: the least counted pair gives its place, and its count (plus one) to the new one
		// (Metwally et al., "Efficient computation of frequent and top-k elements in data
		// streams", 2005: Space-Saving), so that a pair refused often is kept whatever came
		// first, its count an upper bound.
		var least [2]string
		low := -1
		for k, c := range n.counts {
			if low < 0 || c < low {
				least, low = k, c
			}
		}
		delete(n.counts, least)
		n.counts[key] = low + 1
	}
	n.since++
	since := n.since
	say := now.Sub(n.logged) >= originLogEvery
	var top []string
	if say {
		n.logged, n.since = now, 0
		for _, k := range n.ranked(originLogPairs) {
			top = append(top, fmt.Sprintf("%s at Host %q (about %d)", k[0], k[1], n.counts[k]))
		}
	}
	n.mu.Unlock()
	if say {
		n.log.Warn("browsers' joins or push connections were refused (403 origin_not_allowed): the page's origin is not this instance's Host nor in --allowed-origins; "+
			"behind a proxy, pass on the Host the visitor wrote, port included (nginx: the host it read with the Host header's port, not $host alone), "+
			"or list the page's origin in --allowed-origins (WAITROOM_ALLOWED_ORIGINS)",
			"refused", since, "top", strings.Join(top, "; "))
	}
}

// ranked returns up to k pairs of the window: near misses first, then by count. The caller
// holds n.mu.
func (n *originNotice) ranked(k int) [][2]string {
	pairs := make([][2]string, 0, len(n.counts))
	for p := range n.counts {
		pairs = append(pairs, p)
	}
	slices.SortFunc(pairs, func(a, b [2]string) int {
		if na, nb := nearMiss(a), nearMiss(b); na != nb {
			if na {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(n.counts[b], n.counts[a]); c != 0 {
			return c
		}
		return cmp.Compare(a[0]+a[1], b[0]+b[1])
	})
	return pairs[:min(len(pairs), k)]
}

// nearMiss reports whether origin names host's own name on another port or scheme: what a
// proxy that drops or changes the port makes of every page of the site.
func nearMiss(p [2]string) bool {
	_, oh, ok := strings.Cut(p[0], "://")
	if !ok {
		return false
	}
	name := func(hp string) string {
		if h, _, err := net.SplitHostPort(hp); err == nil {
			return h
		}
		return strings.Trim(hp, "[]")
	}
	return oh != "" && strings.EqualFold(strings.TrimSuffix(name(oh), "."), strings.TrimSuffix(name(p[1]), "."))
}

func (n *originNotice) warnings() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.now().Sub(n.window) >= originWindow {
		return nil
	}
	var out []string
	for _, k := range n.ranked(originMaxWarnings) {
		out = append(out, fmt.Sprintf("About %d joins or push connections from pages at %s were refused (403 origin_not_allowed) at Host %q in the last 10 minutes: "+
			"behind a proxy, pass on the Host the visitor wrote, port included, or list the origin in --allowed-origins.", n.counts[k], k[0], k[1]))
	}
	return out
}

// clip keeps at most originMaxText bytes of s.
func clip(s string) string {
	if len(s) > originMaxText {
		return s[:originMaxText] + "…"
	}
	return s
}

// warnings are the console's lines about the deployment: untrusted forwarding headers, refused
// origins, then instances that do not share this one's token key (as of the last beat).
func (a *App) warnings() []string {
	w := append(a.forwarding.warnings(), a.origins.warnings()...)
	if a.Recorder != nil && a.tokenKeys != nil {
		w = append(w, a.tokenKeys.warnings(a.Recorder.Instances())...)
	}
	return w
}
