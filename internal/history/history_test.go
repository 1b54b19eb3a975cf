package history

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestSamplesRoundTrip(t *testing.T) {
	s := EventSample{At: t0, Generation: 3, Waiting: 10, Active: 2, MaxActive: 5, Serving: 7, AdmittedTotal: 6, LastNumber: 17,
		Paused: true, Capacity: 100, Sold: 40, Held: 3, Rejected: 9, Unavailable: 1, LeftWaiting: 4, Unclaimed: 2, SoldOut: true,
		Refusals: [4]int64{5, 6, 7, 8}, Life: LifeOf("f00dfacecafe0123"), VoidLeft: 1012}
	got, ok := DecodeEventSample(Entry{At: t0, Data: s.Encode()})
	require.True(t, ok)
	require.Equal(t, s, got)
	c := CampaignSample{At: t0, Stock: 5, Entries: 9, Issued: 4, Rejected: 4, Taken: 1}
	gotc, ok := DecodeCampaignSample(Entry{At: t0, Data: c.Encode()})
	require.True(t, ok)
	require.Equal(t, c, gotc)
	p := Checkpoint{At: t0, Generation: 2, LastNumber: 99}
	gotp, ok := DecodeCheckpoint(Entry{At: t0, Data: p.Encode()})
	require.True(t, ok)
	require.Equal(t, p, gotp)

	// Fields added at the end later read as 0 from older samples; other versions and garbage
	// are refused.
	old, ok := DecodeEventSample(Entry{At: t0, Data: "1,3,10"})
	require.True(t, ok)
	require.Equal(t, EventSample{At: t0, Generation: 3, Waiting: 10}, old)
	for _, bad := range []string{"", "2,1,2", "1,x", "garbage"} {
		_, ok := DecodeEventSample(Entry{Data: bad})
		require.False(t, ok, bad)
	}
}

// series makes samples every interval with admitted(i) admissions in total at sample i.
func series(n int, interval time.Duration, admitted func(i int) int64) []EventSample {
	s := make([]EventSample, n)
	for i := range s {
		s[i] = EventSample{At: t0.Add(time.Duration(i) * interval), AdmittedTotal: admitted(i), LastNumber: admitted(i)}
	}
	return s
}

// TestRateHoldsBetweenAdmissions: one admission every 10 s, sampled every 5 s, reads 0.1/s at
// every sample once two minutes are known — never 0 between two admissions — while a busy
// line reads its rate over the last interval alone.
func TestRateHoldsBetweenAdmissions(t *testing.T) {
	slow := Rates(series(60, 5*time.Second, func(i int) int64 { return int64(i / 2) }))
	for i := 24; i < 60; i++ {
		require.InDelta(t, 0.1, slow[i].Admissions.PerS, 0.01, "sample %d", i)
		require.Equal(t, 2*time.Minute, slow[i].Admissions.Window)
	}
	require.InDelta(t, 0.1, slow[2].Admissions.PerS, 1e-9, "the first samples read over all there is")

	busy := Rates(series(10, 5*time.Second, func(i int) int64 { return int64(i) * 500 }))
	require.InDelta(t, 100, busy[9].Admissions.PerS, 1e-9)
	require.Equal(t, 5*time.Second, busy[9].Admissions.Window, "a busy line is read over one interval")

	// A stop: the rate falls as the window slides past the last admissions, to 0 after an hour.
	stopped := Rates(series(800, 5*time.Second, func(i int) int64 { return int64(min(i, 60) * 10) }))
	require.InDelta(t, 2, stopped[60].Admissions.PerS, 1e-9)
	require.Less(t, stopped[300].Admissions.PerS, stopped[100].Admissions.PerS)
	require.Greater(t, stopped[300].Admissions.PerS, 0.0)
	require.Zero(t, stopped[799].Admissions.PerS)
}

// TestRateResets: a total that falls (a new line generation, counters that expired) counts
// from 0 again instead of reading as a negative rate; units sold are a gauge (cancellations
// lower them).
func TestRateResets(t *testing.T) {
	s := series(5, 5*time.Second, func(i int) int64 { return []int64{100, 150, 200, 20, 70}[i] })
	r := Rates(s)
	require.InDelta(t, 20.0/5, r[3].Admissions.PerS, 1e-9, "after the reset: the 20 of the new line")
	require.InDelta(t, 10, r[4].Admissions.PerS, 1e-9)
	for i := range s {
		s[i].Sold = []int64{0, 20, 40, 30, 30}[i]
	}
	r = Rates(s)
	require.InDelta(t, -2, r[3].Sales.PerS, 1e-9, "a cancellation lowers the net sales rate")

	errs := series(3, 5*time.Second, func(int) int64 { return 0 })
	errs[1].Rejected, errs[2].Rejected, errs[2].Unavailable = 10, 15, 5
	re := Rates(errs)
	require.Equal(t, []float64{0, 2, 1}, []float64{re[0].Rejected, re[1].Rejected, re[2].Rejected}, "429s over each interval")
	require.InDelta(t, 1, re[2].Unavailable, 1e-9)
}

func TestForecastEvent(t *testing.T) {
	e := event.Event{ID: "x", MaxActive: 10, SessionTTL: time.Hour, Capacity: 100}.WithDefaults()
	s := series(25, 5*time.Second, func(i int) int64 { return int64(i) * 10 }) // 2 admissions/s
	for i := range s {
		s[i].Waiting, s[i].Capacity, s[i].Sold = 120, 100, int64(i*2) // 0.4 units/s
	}
	f := ForecastEvent(e, s, Rates(s))
	require.InDelta(t, 2, f.Admissions.PerS, 1e-9)
	require.Equal(t, int64(60), f.ClearS, "120 waiting at 2/s")
	require.True(t, f.ForSale)
	require.Equal(t, int64(52), f.UnitsLeft)
	require.Equal(t, int64(130), f.SellOutS, "52 units at 0.4/s")

	paused := e
	paused.Paused = true
	require.Equal(t, int64(-1), ForecastEvent(paused, s, Rates(s)).ClearS)
	s[len(s)-1].Waiting = 0
	require.Zero(t, ForecastEvent(e, s, Rates(s)).ClearS)
	require.Equal(t, EventForecast{ClearS: -1, SellOutS: -1}, ForecastEvent(event.Event{}, nil, nil))

	still := series(3, 5*time.Second, func(int) int64 { return 0 })
	for i := range still {
		still[i].Capacity, still[i].Sold = 100, 10
	}
	require.Equal(t, int64(-1), ForecastEvent(e, still, Rates(still)).SellOutS, "nothing sells: no forecast")
}

func TestForecastCampaign(t *testing.T) {
	s := make([]CampaignSample, 13)
	for i := range s {
		s[i] = CampaignSample{At: t0.Add(time.Duration(i) * 5 * time.Second), Stock: 1000, Entries: int64(i) * 50, Issued: int64(i) * 40}
	}
	f := ForecastCampaign(s, RatesOfCampaign(s))
	require.InDelta(t, 10, f.Entries.PerS, 1e-9)
	require.InDelta(t, 8, f.Issued.PerS, 1e-9)
	require.Equal(t, int64(400), f.StockLeft)
	require.Equal(t, int64(40), f.StockOutS)
	s[12].Entries = 1200
	require.Zero(t, ForecastCampaign(s, RatesOfCampaign(s)).StockOutS)
}

// TestJoinTimes: ticket numbers map to join times by the checkpoints around them; the waits of
// an admission step spread over its range.
func TestJoinTimes(t *testing.T) {
	c := NewClock(2,
		[]Checkpoint{{At: t0.Add(10 * time.Second), Generation: 2, LastNumber: 100}, {At: t0.Add(20 * time.Second), Generation: 2, LastNumber: 200}},
		[]Checkpoint{{At: t0, Generation: 2, LastNumber: 0}, {At: t0.Add(15 * time.Second), Generation: 1, LastNumber: 5}})
	require.Len(t, c, 3, "only the generation asked for")
	now := t0.Add(time.Minute)
	at, ok := c.JoinTime(150, now)
	require.True(t, ok)
	require.Equal(t, t0.Add(15*time.Second), at, "half-way between the checkpoints")
	at, _ = c.JoinTime(50, now)
	require.Equal(t, t0.Add(5*time.Second), at)
	at, _ = c.JoinTime(250, now)
	require.Equal(t, t0.Add(40*time.Second), at, "after the last checkpoint: half-way to now")
	_, ok = Clock(nil).JoinTime(1, now)
	require.False(t, ok)

	w := c.Waits(101, 200, 3, now)
	require.Len(t, w, 3)
	require.InDelta(t, 50, w[0].Seconds(), 0.2) // number 101 joined at ~10.1 s
	require.InDelta(t, 45, w[1].Seconds(), 0.2)
	require.InDelta(t, 40, w[2].Seconds(), 0.01)
	require.Nil(t, c.Waits(5, 4, 1, now))
	require.False(t, math.IsNaN(c.Waits(150, 150, 1, now)[0].Seconds()))
}

// TestSameLife: an event's samples of an earlier life (another Epoch) are dropped, its own and
// those written before samples named their life kept, in order.
func TestSameLife(t *testing.T) {
	now, before := LifeOf("00000000000000a2"), LifeOf("ffffffffffffffff")
	require.NotZero(t, now)
	require.NotZero(t, before, "the top bit set")
	for _, bad := range []string{"", "a2", "00000000000000g2", "000000000000000a2"} {
		require.Zero(t, LifeOf(bad), bad)
	}
	s := []EventSample{{Waiting: 1}, {Waiting: 2, Life: before}, {Waiting: 3, Life: now}, {Waiting: 4, Life: before}, {Waiting: 5, Life: now}}
	require.Equal(t, []EventSample{{Waiting: 1}, {Waiting: 3, Life: now}, {Waiting: 5, Life: now}}, SameLife(s, now))
}

// TestGivenOut: the tickets given out are the last number less the void numbers still void,
// whose count falls as their holders show up, never fewer than at the sample before (a ticket
// seen before the loss and again is one arrival); a new line counts from 0 again (Unwrap).
func TestGivenOut(t *testing.T) {
	s := func(gen uint32, last, void int64) EventSample {
		return EventSample{Generation: gen, LastNumber: last, VoidLeft: void}
	}
	got := GivenOut([]EventSample{
		s(1, 0, 0),
		s(1, 2, 0),
		s(1, 1024, 1024), // a resume with no checkpoint past 0: 1..1024 void, 1 and 2 among them
		s(1, 1024, 1022), // 1 and 2 showed up
		s(1, 1030, 1022), // 6 joins since
		s(2, 3, 0),       // a new line
		s(2, 1030, 1021), // its resume: 4..1024 void, 6 joins since
	})
	require.Equal(t, []int64{0, 2, 2, 2, 8, 3, 9}, got)
	require.Equal(t, []float64{0, 2, 2, 2, 8, 11, 17}, Unwrap(got), "the report's arrivals")
	require.Equal(t, []int64{0, 1}, GivenOut([]EventSample{s(1, 1024, 1024), s(1, 1025, 1024)}), "a history that starts at a resume")
}
