package app

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/waitroom/waitroom/internal/recorder"
)

// keyNotice tells the operator about live instances that do not hold this instance's current
// admission-token key (WAITROOM_TOKEN_KEY, by its kid: token.Admissions.KIDs). Behind one load
// balancer such an instance answers this one's tickets 404 and its tokens and challenges 401:
// every visitor whose requests reach both loses their place, and nothing else says why. An
// instance started with another key, or one that signs with a new key before the others verify
// it (a rotation done in one round, docs/verify-token.md), is such an instance. Each instance
// warns about the others that cannot read what it makes, in its warnings (the console's
// instances, GET /v1/instances) and once per such peer in the log.
type keyNotice struct {
	log  *slog.Logger
	mine []string // this instance's kids, current first

	mu     sync.Mutex
	logged map[string]bool // the peers (by id) logged, of those warned about at the last call
}

// warnings returns a line for each live instance in alive that does not hold this instance's
// current kid. An instance that says nothing of its keys (a version before the field) is not
// judged.
func (n *keyNotice) warnings(alive []recorder.Instance) []string {
	if len(n.mine) == 0 {
		return nil
	}
	var out []string
	warned := map[string]bool{}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, in := range alive {
		if in.Self || len(in.Keys) == 0 || slices.Contains(in.Keys, n.mine[0]) {
			continue
		}
		where := in.Name
		if in.Addr != "" {
			where += " " + in.Addr
		}
		out = append(out, fmt.Sprintf("instance %s (%s) does not hold this instance's WAITROOM_TOKEN_KEY (its keys %v, this one signs with %s): "+
			"the tickets, tokens and challenges made here are unknown there (404, 401); give every instance the same key (a rotation: docs/verify-token.md)",
			in.ID, where, in.Keys, n.mine[0]))
		warned[in.ID] = true
		if !n.logged[in.ID] {
			n.log.Warn("an instance does not hold this instance's token key: visitors who reach both lose their place",
				"instance", in.ID, "name", where, "its_keys", in.Keys, "signing_key", n.mine[0])
		}
	}
	n.logged = warned // the peers gone are forgotten: the map holds the live ones only
	return out
}
