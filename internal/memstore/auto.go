package memstore

import (
	"context"
	"maps"

	"github.com/waitroom/waitroom/internal/autoadmit"
)

var _ autoadmit.Store = (*Store)(nil)

// autoRecord is an event's signals and controller state (package autoadmit). In process they
// need no expiry: they go with the event (DeleteEvent) or the process.
type autoRecord struct {
	signals map[string]int64
	data    string
	seq     int64
}

func (s *Store) autoOf(event string) *autoRecord {
	r := s.auto[event]
	if r == nil {
		r = &autoRecord{signals: map[string]int64{}}
		s.auto[event] = r
	}
	return r
}

// AddSignals implements autoadmit.Store.
func (s *Store) AddSignals(_ context.Context, event string, deltas map[string]int64) error {
	s.autoMu.Lock()
	defer s.autoMu.Unlock()
	r := s.autoOf(event)
	for k, d := range deltas {
		v, ok := addInt64(r.signals[k], d)
		if !ok {
			v = d // past int64: the total starts again from this add, as on Redis (hist_add.lua)
		}
		r.signals[k] = v
	}
	return nil
}

// Signals implements autoadmit.Store.
func (s *Store) Signals(_ context.Context, event string) (map[string]int64, error) {
	s.autoMu.Lock()
	defer s.autoMu.Unlock()
	if r := s.auto[event]; r != nil {
		return maps.Clone(r.signals), nil
	}
	return map[string]int64{}, nil
}

// Control implements autoadmit.Store.
func (s *Store) Control(_ context.Context, event string) (string, int64, error) {
	s.autoMu.Lock()
	defer s.autoMu.Unlock()
	if r := s.auto[event]; r != nil {
		return r.data, r.seq, nil
	}
	return "", 0, nil
}

// SetControl implements autoadmit.Store: the state and the line's limits change under the
// line's lock, in one step.
func (s *Store) SetControl(_ context.Context, event string, seq int64, data string, maxActive int64, admitRate float64) (bool, error) {
	s.mu.RLock()
	ln := s.lines[event]
	s.mu.RUnlock()
	if ln != nil {
		ln.mu.Lock()
		defer ln.mu.Unlock()
	}
	s.autoMu.Lock()
	defer s.autoMu.Unlock()
	r := s.autoOf(event)
	if r.seq != seq-1 {
		return false, nil
	}
	r.seq, r.data = seq, data
	if ln != nil && ln.cfg.Auto {
		ln.cfg.MaxActive, ln.cfg.AdmitRate, ln.autoSet = maxActive, admitRate, true
	}
	return true, nil
}

// addInt64 returns a + b, and false when it overflows int64.
func addInt64(a, b int64) (int64, bool) {
	c := a + b
	return c, (c > a) == (b > 0)
}
