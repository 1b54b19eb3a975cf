package recorder

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/queue"
)

// TestLifecycle: the sampler logs each step of an event's life once: opened, paused, resumed,
// draw revealed, sold out, closed; nothing for what it saw first, nor when nothing changed.
func TestLifecycle(t *testing.T) {
	var buf bytes.Buffer
	r := &Recorder{cfg: Config{Logger: slog.New(slog.NewTextHandler(&buf, nil))}, phases: map[string]phase{}}
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	e := event.Event{ID: "gig", OpensAt: t0.Add(time.Minute), ClosesAt: t0.Add(time.Hour)}
	see := func(at time.Time, st queue.Stats) {
		st.Now = at
		r.lifecycle(e, st)
	}
	see(t0, queue.Stats{})
	see(t0.Add(time.Second), queue.Stats{})
	see(t0.Add(2*time.Minute), queue.Stats{DrawSeed: []byte{1}, DrawN: 42})
	e.Paused = true
	see(t0.Add(3*time.Minute), queue.Stats{DrawSeed: []byte{1}, DrawN: 42})
	e.Paused = false
	see(t0.Add(4*time.Minute), queue.Stats{DrawSeed: []byte{1}, DrawN: 42})
	see(t0.Add(5*time.Minute), queue.Stats{DrawSeed: []byte{1}, DrawN: 42, SoldOut: true})
	see(t0.Add(2*time.Hour), queue.Stats{DrawSeed: []byte{1}, DrawN: 42, SoldOut: true})
	see(t0.Add(3*time.Hour), queue.Stats{DrawSeed: []byte{1}, DrawN: 42, SoldOut: true})

	var steps []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if !strings.Contains(line, `msg="event lifecycle" event=gig`) {
			t.Fatalf("unexpected line %q", line)
		}
		_, step, _ := strings.Cut(line, "step=")
		steps = append(steps, step)
	}
	want := []string{"opened", `"draw revealed" n=42`, "paused", "resumed", `"sold out"`, "closed"}
	if strings.Join(steps, "|") != strings.Join(want, "|") {
		t.Fatalf("steps %q, want %q", steps, want)
	}
}
