package recorder

import (
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/queue"
)

// phase is what an operator follows of an event's life, as the sampler last saw it.
type phase struct {
	state   string // event.Event.State: pre_queue, open, paused, closed
	soldOut bool
	drawn   bool // the draw's seed revealed (the line opened with a draw)
}

// lifecycle logs one line for each step of an event's life the sampler sees: opened, paused,
// resumed, closed, sold out, draw revealed — once for the fleet, since one instance samples (an
// instance that takes the lease over starts from what it sees, and logs only what changes
// after). The line is at level Info with msg "event lifecycle", and the attributes event, step
// and, for a draw, n (the tickets drawn).
func (r *Recorder) lifecycle(e event.Event, st queue.Stats) {
	now := phase{state: e.State(st.Now), soldOut: st.SoldOut, drawn: st.DrawSeed != nil}
	r.mu.Lock()
	was, seen := r.phases[e.ID]
	r.phases[e.ID] = now
	r.mu.Unlock()
	if !seen {
		return
	}
	log := func(step string, attrs ...any) {
		r.cfg.Logger.Info("event lifecycle", append([]any{"event", e.ID, "step", step}, attrs...)...)
	}
	if now.state != was.state {
		switch {
		case now.state == "closed":
			log("closed")
		case was.state == "pre_queue":
			log("opened")
			if now.state == "paused" {
				log("paused")
			}
		case now.state == "paused":
			log("paused")
		case was.state == "paused" && now.state == "open":
			log("resumed")
		}
	}
	if now.drawn && !was.drawn {
		log("draw revealed", "n", st.DrawN)
	}
	if now.soldOut && !was.soldOut {
		log("sold out")
	}
}
