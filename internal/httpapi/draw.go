package httpapi

import (
	"encoding/hex"
	"net/http"
	"time"

	"github.com/waitroom/waitroom/internal/draw"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpjson"
)

// Draw statuses of GET /v1/events/{event_id}/draw.
const (
	drawPending = "pending" // the pre-queue's order is drawn at the opening: the commitment is shown
	drawDrawn   = "drawn"   // the opening drew: the seed and N are shown
	drawNone    = "none"    // no draw: arrival order, or nobody waited for the opening to be drawn
)

// drawAlgorithm names the algorithm that recomputes the places (docs/draw.md).
const drawAlgorithm = "waitroom draw v1: HKDF-SHA256 key, AES-128 Feistel network with cycle walking (docs/draw.md); check with `waitroom verify-draw --seed SEED --commitment COMMITMENT --n N`"

// drawJSON is GET /v1/events/{event_id}/draw.
type drawJSON struct {
	EventID       string     `json:"event_id"`
	PrequeueOrder string     `json:"prequeue_order"`
	Status        string     `json:"status"` // pending, drawn or none
	OpensAt       *time.Time `json:"opens_at"`
	// Commitment is the hex SHA-256 of the seed: published before the opening (null: none).
	Commitment *string `json:"commitment"`
	// Seed (hex) and N (tickets 1..N drawn) once drawn; null before.
	Seed      *string `json:"seed"`
	N         *int64  `json:"n"`
	Algorithm string  `json:"algorithm"`
}

// getDraw serves GET /v1/events/{event_id}/draw (public): the opening's draw. Before the
// opening it shows the commitment to the secret seed; once the line's opening drew, the seed
// and N, from which anybody recomputes every ticket's place (docs/draw.md). What was drawn
// comes from the line store, so a configuration changed after the opening does not change it.
func (a *API) getDraw(w http.ResponseWriter, r *http.Request) {
	id, ok := httpjson.EventID(w, r)
	if !ok {
		return
	}
	e, ok := a.knownEvent(w, r, id)
	if !ok {
		return
	}
	st, err := a.cfg.Line.Stats(r.Context(), e.ID)
	if err != nil {
		a.StoreError(w, err, id)
		return
	}
	v := drawJSON{EventID: id, PrequeueOrder: e.PrequeueOrder, Status: drawNone, OpensAt: timePtr(e.OpensAt), Algorithm: drawAlgorithm}
	switch {
	case st.DrawSeed != nil:
		seed, commitment, n := hex.EncodeToString(st.DrawSeed), draw.Commitment(st.DrawSeed), st.DrawN
		v.Status, v.Seed, v.Commitment, v.N = drawDrawn, &seed, &commitment, &n
	case e.DrawSeed != nil && (st.DrawPending || e.PrequeueOrder == event.OrderRandom && e.State(st.Now) == "pre_queue"):
		commitment := draw.Commitment(e.DrawSeed)
		v.Status, v.Commitment = drawPending, &commitment
	}
	httpjson.WriteJSON(w, http.StatusOK, v)
}
