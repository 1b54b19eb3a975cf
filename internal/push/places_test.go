package push

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/draw"
	"github.com/waitroom/waitroom/internal/queue"
)

// TestLinePlaces: a room maps numbers to places as the store's counters tell: none while the
// draw is pending, the draw's permutation for numbers 1..N once drawn, numbers beyond.
func TestLinePlaces(t *testing.T) {
	seed := bytes.Repeat([]byte{7}, draw.SeedLen)
	var lp linePlaces
	lp.update(queue.Stats{Generation: 1, DrawPending: true})
	require.Zero(t, lp.place(5), "no place before the draw")

	lp.update(queue.Stats{Generation: 1, DrawN: 50, DrawSeed: seed})
	d, err := draw.New(seed, 50)
	require.NoError(t, err)
	seen := map[int64]bool{}
	for n := int64(1); n <= 50; n++ {
		p := lp.place(n)
		require.Equal(t, d.Place(n), p)
		require.Equal(t, n, lp.number(p))
		seen[p] = true
	}
	require.Len(t, seen, 50)
	require.Equal(t, int64(51), lp.place(51), "joins after the opening keep their numbers")
	require.Equal(t, int64(51), lp.number(51))

	lp.update(queue.Stats{Generation: 2}) // a new line without a draw
	require.Equal(t, int64(5), lp.place(5))
	require.Equal(t, int64(5), lp.number(5))
}
