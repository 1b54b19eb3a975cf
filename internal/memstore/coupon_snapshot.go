package memstore

import (
	"bytes"
	"encoding/gob"
	"fmt"

	"github.com/waitroom/waitroom/internal/coupon"
)

// couponSnapshotVersion changes whenever the encoded shape does; an unknown version is refused.
const couponSnapshotVersion = 1

type couponSnapshot struct {
	Version   int
	Campaigns []campaignState
}

// campaignState is a campaign's exported form for gob.
type campaignState struct {
	Config                 coupon.Campaign
	Incarnation            string
	Seq, Ceiling, Admitted int64
	Users                  map[string]int64
	Entries                map[int64]entryState
	Queue                  []int64
	Queued                 map[int64]bool
	Taken                  map[int64]int64
	Results                map[int64]string
	QueuedAt               map[int64]int64
}

type entryState struct {
	UserID      string
	Unconfirmed bool
}

// Snapshot encodes every campaign (gob), for the embedded deployment to keep them across a
// graceful restart as it keeps the line (Store.Snapshot): without it, a restart read as a lost
// store, and the campaigns resumed from the database with their entry numbers moved past a
// gap (api.md: numbers skip only after a store's loss).
func (cs *Coupons) Snapshot() ([]byte, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	snap := couponSnapshot{Version: couponSnapshotVersion}
	for _, c := range cs.camp {
		c.mu.Lock()
		defer c.mu.Unlock()
		entries := make(map[int64]entryState, len(c.entries))
		for n, e := range c.entries {
			entries[n] = entryState{UserID: e.userID, Unconfirmed: e.unconfirmed}
		}
		snap.Campaigns = append(snap.Campaigns, campaignState{
			Config: c.cfg, Incarnation: c.inc, Seq: c.seq, Ceiling: c.ceil, Admitted: c.admitted,
			Users: c.users, Entries: entries, Queue: c.queue, Queued: c.queued, Taken: c.taken,
			Results: c.results, QueuedAt: c.queuedAt,
		})
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(snap); err != nil {
		return nil, fmt.Errorf("memstore: coupon snapshot: %w", err)
	}
	return buf.Bytes(), nil
}

// Restore replaces every campaign with those of a Snapshot.
func (cs *Coupons) Restore(data []byte) error {
	var snap couponSnapshot
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&snap); err != nil {
		return fmt.Errorf("memstore: coupon restore: %w", err)
	}
	if snap.Version != couponSnapshotVersion {
		return fmt.Errorf("memstore: coupon restore: snapshot version %d, want %d", snap.Version, couponSnapshotVersion)
	}
	camps := make(map[string]*campaign, len(snap.Campaigns))
	for _, st := range snap.Campaigns {
		c := &campaign{cfg: st.Config, inc: st.Incarnation, seq: st.Seq, ceil: st.Ceiling, admitted: st.Admitted,
			users: st.Users, entries: make(map[int64]*memEntry, len(st.Entries)), queue: st.Queue, queued: st.Queued,
			taken: st.Taken, results: st.Results, queuedAt: st.QueuedAt}
		for n, e := range st.Entries {
			c.entries[n] = &memEntry{userID: e.UserID, unconfirmed: e.Unconfirmed}
		}
		// gob leaves an empty map nil.
		if c.users == nil {
			c.users = map[string]int64{}
		}
		if c.queued == nil {
			c.queued = map[int64]bool{}
		}
		if c.taken == nil {
			c.taken = map[int64]int64{}
		}
		if c.results == nil {
			c.results = map[int64]string{}
		}
		if c.queuedAt == nil {
			c.queuedAt = map[int64]int64{}
		}
		camps[st.Config.ID] = c
	}
	cs.mu.Lock()
	cs.camp = camps
	cs.mu.Unlock()
	return nil
}
