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
// do not hide the one a misconfiguration causes (an Origin of the Host's own name on another
// port): the log says a line a minute at most naming the top pairs, the warnings rank near
// misses first, then by count over the last ten minutes, each clipped.
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
	for i := range 300 { // made-up origins refused more often than the real one
		n.refused(fmt.Sprintf("http://%c.attacker.example", 'a'+i%3), "x.example")
	}
	require.Equal(t, 1, strings.Count(logs.String(), "level=WARN"), "a line a minute at most")
	w := n.warnings()
	require.Len(t, w, originMaxWarnings)
	require.Contains(t, w[0], "joins or push connections from pages at https://shop.example:8080", "a near miss ranks first, on top of 500 others")
	for _, line := range w {
		require.Less(t, len(line), 1000, "clipped")
	}

	now = now.Add(time.Minute)
	n.refused("http://b.attacker.example", "x.example")
	require.Equal(t, 2, strings.Count(logs.String(), "level=WARN"))
	line := logs.String()[strings.LastIndex(logs.String(), "level=WARN"):]
	require.Contains(t, line, "refused=550", "the count since the line before")
	require.Contains(t, line, "https://shop.example:8080 at Host", "the line names the top pairs, not the latest")

	now = now.Add(originWindow)
	require.Empty(t, n.warnings(), "ten minutes without a refusal: no warning")
	n.refused("https://shop.example:8080", "shop.example")
	require.Len(t, n.warnings(), 1, "a new window counts afresh")
}
