package push

import (
	"context"
	"net/http"
	"time"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/store"
)

// The cap of push connections per client (an event's limits.push_per_client) holds for all the
// instances together: every connection is counted in the store's Shares under its event and
// client, as this hub's share — a lease the hub renews every clientShareTTL/3 while it holds
// connections, given back one by one as they close, and lapsing clientShareTTL after the hub
// last renewed it (the instance died, or lost the store). A connect costs one store call more
// (the take), a close one (the give), and the hub one call per event and 256 clients every
// renewal. A client refused is refused here without asking the store for clientRefusal (its
// Retry-After is clientRetry anyway), so that a bot reconnecting at full speed costs the store
// nothing more. When the store does not answer, the hub caps on its own connections.

const (
	// clientShareTTL is how long a share lives unrenewed.
	clientShareTTL = 30 * time.Second
	// clientRefusal is how long a refused client is refused without asking the store: it can
	// only be stricter than the store (a place freed meanwhile elsewhere waits this long).
	clientRefusal = time.Second
	// clientRetry is the Retry-After of a client at its cap of push connections: a page polls
	// meanwhile, and tries again after it.
	clientRetry = 30 * time.Second
)

// clientKey names one client's connections to one event.
type clientKey struct{ event, client string }

// clientCount is this hub's count of one client's connections to one event: held, and pending
// in the store (a take in flight; not renewed until it is held, or a renewal that restores a
// lapsed share would count it twice).
type clientCount struct{ held, pending int64 }

// takeClient counts a connection of r's client toward the event's limits.push_per_client (the
// store's count asked until deadline, else this instance's own); ok
// false when the client holds that many already (on all instances, with Config.Shares).
// client is "" when no cap applies.
func (h *Hub) takeClient(r *http.Request, eventID string, deadline time.Time) (client string, ok bool) {
	if h.cfg.ClientKey == nil {
		return "", true
	}
	client = h.cfg.ClientKey(r)
	if client == "" {
		return "", true
	}
	limit := int64(event.DefaultPushPerClient)
	if e, found := h.cfg.Events.Cached(eventID); found && e.Limits.PushPerClient > 0 {
		limit = e.Limits.PushPerClient
	}
	refusal := eventID + "\x00" + client
	if _, refused := h.clientRefusals.Refused(refusal); refused {
		return "", false
	}
	k := clientKey{eventID, client}
	h.clientMu.Lock()
	c := h.clients[k]
	held := c.held
	if h.cfg.Shares == nil {
		if c.held >= limit {
			h.clientMu.Unlock()
			return "", false
		}
		c.held++
		h.clients[k] = c
		h.clientMu.Unlock()
		return client, true
	}
	c.pending++
	h.clients[k] = c
	h.clientMu.Unlock()
	// Not cancelled with the client: a take cancelled after it was sent may still be made in
	// the store, or not, while this instance counts it as not made; the connection that goes
	// on, or its release (GiveShare) once its client is found gone, keeps the two in step.
	ctx, cancel := context.WithDeadline(context.WithoutCancel(r.Context()), deadline)
	taken, err := h.cfg.Shares.TakeShare(ctx, store.TakeParams{
		Key: store.CountKey{Scope: eventID, Name: client}, Holder: h.origin, Held: held, Limit: limit, TTL: clientShareTTL,
	})
	cancel()
	if err != nil {
		h.log.Warn("push: counting a client's connections in the store; this instance counts its own meanwhile",
			"event", eventID, "client", client, "err", err)
		taken = held < limit
	}
	h.clientMu.Lock()
	c = h.clients[k]
	c.pending--
	if taken {
		c.held++
	}
	h.setClient(k, c)
	h.clientMu.Unlock()
	if !taken {
		h.clientRefusals.Refuse(refusal, clientRefusal)
		return "", false
	}
	return client, true
}

// setClient stores c as k's count, dropping an empty one. Called with clientMu held.
func (h *Hub) setClient(k clientKey, c clientCount) {
	if c.held <= 0 && c.pending <= 0 {
		delete(h.clients, k)
		return
	}
	h.clients[k] = c
}

// releaseClient gives back a connection taken by takeClient (client "" = none was taken),
// asking the store until deadline (zero: storeCallTimeout from now).
func (h *Hub) releaseClient(eventID, client string, deadline time.Time) {
	if client == "" {
		return
	}
	k := clientKey{eventID, client}
	h.clientMu.Lock()
	c := h.clients[k]
	c.held--
	h.setClient(k, c)
	h.clientMu.Unlock()
	if h.cfg.Shares == nil {
		return
	}
	// Not on the hub's context: a connection closed by Stop gives its place back too.
	if deadline.IsZero() {
		deadline = time.Now().Add(storeCallTimeout)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := h.cfg.Shares.GiveShare(ctx, store.CountKey{Scope: eventID, Name: client}, h.origin); err != nil {
		h.log.Warn("push: giving back a client's connection in the store (its share lapses by itself)",
			"event", eventID, "client", client, "err", err)
	}
}

// renewClients renews this hub's shares every clientShareTTL/3 (called by the tick), on a
// goroutine of its own: one renewal at a time.
func (h *Hub) renewClients(now time.Time) {
	if h.cfg.Shares == nil || now.Before(h.renewAt) || !h.renewing.CompareAndSwap(false, true) {
		return
	}
	h.renewAt = now.Add(clientShareTTL / 3)
	h.clientMu.Lock()
	shares := make([]store.Share, 0, len(h.clients))
	for k, c := range h.clients {
		if c.held > 0 {
			shares = append(shares, store.Share{Key: store.CountKey{Scope: k.event, Name: k.client}, N: c.held})
		}
	}
	h.clientMu.Unlock()
	if len(shares) == 0 {
		h.renewing.Store(false)
		return
	}
	h.wg.Go(func() {
		defer h.renewing.Store(false)
		ctx, cancel := context.WithTimeout(h.ctx, storeCallTimeout)
		defer cancel()
		if err := h.cfg.Shares.RenewShares(ctx, h.origin, shares, clientShareTTL); err != nil && h.ctx.Err() == nil {
			h.log.Warn("push: renewing the clients' connection counts in the store", "clients", len(shares), "err", err)
		}
	})
}
