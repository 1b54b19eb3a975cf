package line

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/clientaddr"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/store"
)

// AdmissionAddressTTL is how long a client address counts as using an admission after its last
// request with it: an event's limits.addresses_per_admission addresses may use one admission
// within it. Two minutes let a phone move from Wi-Fi to its carrier and back without locking
// itself out, while a cookie copied to many machines is refused on all but a few at once.
const AdmissionAddressTTL = 2 * time.Minute

// binder remembers, per instance, the (ticket, address) pairs counted in the store in the last
// half TTL, so that an admitted visitor's requests cost no store call but one per address every
// minute. It holds about one entry per admitted visitor and address; swept as it goes.
type binder struct {
	mu    sync.Mutex
	seen  map[bindKey]time.Time // when the pair's share was last taken in the store
	swept time.Time
}

type bindKey struct {
	ref    queue.TicketRef
	client netip.Prefix // clientaddr.Group
}

// Bind counts client as an address using the admission of ticket ref: ErrAdmissionShared when
// the event's limits.addresses_per_admission other addresses use it already (each for
// AdmissionAddressTTL after its last request), counted in the store's shares so that the limit
// holds across instances. An address already counted is let through and kept counted. The
// doors that pass admitted visitors on (the gate, its forward-auth check, the API's admission
// check that the gate middleware calls) call it for every request they pass; an address seen
// here in the last half TTL costs no store call. The zero Addr (unknown) is not counted. A store
// that does not answer is an error of its own (every door answers it 503 store_unavailable):
// the request is not let through uncounted, since a cookie copied to many machines would pass
// on all of them while the store is away (security decisions fail closed); an address counted
// in the last half TTL still passes, with no store call.
func (s *Service) Bind(ctx context.Context, ref queue.TicketRef, client netip.Addr) error {
	if s.cfg.Shares == nil || !client.IsValid() {
		return nil
	}
	k := bindKey{ref: ref, client: clientaddr.Group(client)}
	now := s.cfg.Now()
	if s.bind.fresh(k, now) {
		return nil
	}
	e := s.limitsOf(ctx, ref.Event)
	ok, err := s.cfg.Shares.TakeShare(ctx, store.TakeParams{
		Key:    store.CountKey{Scope: ref.Event, Name: "adm:" + strconv.FormatUint(uint64(ref.Generation), 10) + ":" + strconv.FormatInt(ref.Number, 10)},
		Holder: clientaddr.KeyOf(client), Limit: e.Limits.AddressesPerAdmission, TTL: AdmissionAddressTTL, Once: true,
	})
	switch {
	case err != nil:
		return fmt.Errorf("line: counting the addresses of an admission: %w", err)
	case !ok:
		return refuse(ErrAdmissionShared, "this admission is in use from "+strconv.FormatInt(e.Limits.AddressesPerAdmission, 10)+
			" other addresses (limits.addresses_per_admission): an admission is its holder's, not to be shared")
	}
	s.bind.taken(k, now)
	return nil
}

// fresh reports whether k's share was taken less than half a TTL ago.
func (b *binder) fresh(k bindKey, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	at, ok := b.seen[k]
	return ok && now.Sub(at) < AdmissionAddressTTL/2
}

func (b *binder) taken(k bindKey, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == nil {
		b.seen = map[bindKey]time.Time{}
	}
	if now.Sub(b.swept) >= AdmissionAddressTTL/2 {
		b.swept = now
		for sk, at := range b.seen {
			if now.Sub(at) >= AdmissionAddressTTL/2 {
				delete(b.seen, sk)
			}
		}
	}
	b.seen[k] = now
}
