package app

import (
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"sync"

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
// drops the port) refuses every page — or a page of a site not in --allowed-origins. Pages on
// other sites are refused by design, so it says so once per origin and host in the log (at most
// maxNoticedPeers of them) and lists them in the console's warnings.
type originNotice struct {
	log *slog.Logger

	mu   sync.Mutex
	seen map[[2]string]bool // {origin, host}
}

func (n *originNotice) refused(origin, host string) {
	key := [2]string{origin, host}
	n.mu.Lock()
	added := !n.seen[key] && len(n.seen) < maxNoticedPeers
	if added {
		n.seen[key] = true
	}
	n.mu.Unlock()
	if added {
		n.log.Warn("a browser's join or push connection was refused (403 origin_not_allowed): its page's origin is not this instance's Host nor in --allowed-origins; "+
			"behind a proxy, pass on the Host the visitor wrote, port included (nginx: proxy_set_header Host $http_host, not $host), or list the page's origin in --allowed-origins (WAITROOM_ALLOWED_ORIGINS)",
			"origin", origin, "host", host)
	}
}

func (n *originNotice) warnings() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.seen))
	for k := range n.seen {
		out = append(out, fmt.Sprintf("Pages at %s were refused joins or push connections (403 origin_not_allowed) at Host %q: "+
			"behind a proxy, pass on the Host the visitor wrote, port included, or list the origin in --allowed-origins.", k[0], k[1]))
	}
	sort.Strings(out)
	return out
}

// warnings are the console's lines about the deployment's proxies: untrusted forwarding
// headers, then refused origins.
func (a *App) warnings() []string {
	return append(a.forwarding.warnings(), a.origins.warnings()...)
}
