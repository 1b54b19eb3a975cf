package app

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
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
// drops the port) refuses every page — or a page of a site not in --allowed-origins. Pages of
// other sites are refused by design, and anyone can send any Origin and Host, so nothing it
// keeps can be used up by them: it logs at most one line a minute (the latest refusal, with
// the count since the line before), and the console's warnings name the refusals most
// frequent in the last ten minutes (counted in a bounded table that a flood of others cannot
// fill for good), where a misconfiguration that refuses every page is on top.
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
	originMaxWarnings = 3
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
	if say {
		n.logged, n.since = now, 0
	}
	n.mu.Unlock()
	if say {
		n.log.Warn("browsers' joins or push connections were refused (403 origin_not_allowed): the page's origin is not this instance's Host nor in --allowed-origins; "+
			"behind a proxy, pass on the Host the visitor wrote, port included (nginx: the host it read with the Host header's port, not $host alone), "+
			"or list the page's origin in --allowed-origins (WAITROOM_ALLOWED_ORIGINS)",
			"origin", key[0], "host", key[1], "refused", since)
	}
}

func (n *originNotice) warnings() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.now().Sub(n.window) >= originWindow {
		return nil
	}
	pairs := make([][2]string, 0, len(n.counts))
	for k := range n.counts {
		pairs = append(pairs, k)
	}
	slices.SortFunc(pairs, func(a, b [2]string) int {
		if c := cmp.Compare(n.counts[b], n.counts[a]); c != 0 {
			return c
		}
		return cmp.Compare(a[0]+a[1], b[0]+b[1])
	})
	var out []string
	for _, k := range pairs[:min(len(pairs), originMaxWarnings)] {
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

// warnings are the console's lines about the deployment's proxies: untrusted forwarding
// headers, then refused origins.
func (a *App) warnings() []string {
	return append(a.forwarding.warnings(), a.origins.warnings()...)
}
