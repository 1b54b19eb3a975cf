package app

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/syncbuf"
)

// TestOriginNoticeIsNotUsedUp: refusals anyone can cause (any Origin, any Host, any length)
// cannot hide the one a misconfiguration causes: the log says a line a minute at most, the
// warnings name the most frequent refusals of the last ten minutes, each clipped.
func TestOriginNoticeIsNotUsedUp(t *testing.T) {
	var logs syncbuf.Buffer
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	n := newOriginNotice(slog.New(slog.NewTextHandler(&logs, nil)), func() time.Time { return now })
	for i := range 200 { // junk first: more pairs than are counted
		n.refused(fmt.Sprintf("https://junk%d.example", i), strings.Repeat("h", 30_000))
	}
	for range 50 { // the proxy that drops the port: every page refused
		n.refused("https://shop.example:8080", "shop.example")
	}
	require.Equal(t, 1, strings.Count(logs.String(), "level=WARN"), "a line a minute at most")
	w := n.warnings()
	require.Len(t, w, originMaxWarnings)
	require.Contains(t, w[0], "joins or push connections from pages at https://shop.example:8080", "on top of 200 others")
	for _, line := range w {
		require.Less(t, len(line), 1000, "clipped")
	}

	now = now.Add(time.Minute)
	n.refused("https://shop.example:8080", "shop.example")
	require.Equal(t, 2, strings.Count(logs.String(), "level=WARN"))
	require.Contains(t, logs.String(), "refused=250", "the count since the line before")

	now = now.Add(originWindow)
	require.Empty(t, n.warnings(), "ten minutes without a refusal: no warning")
	n.refused("https://shop.example:8080", "shop.example")
	require.Len(t, n.warnings(), 1, "a new window counts afresh")
}
