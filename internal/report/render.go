package report

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/csv"
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/history"
)

// style is the page's one style sheet, inline so that the page stands alone (saved, mailed,
// printed); the Content-Security-Policy of the page, and of the console that shows it, allow
// it by its hash (StyleHash) and nothing else inline.
//
//go:embed report.css
var style string

// StyleHash is the CSP source of the page's inline style sheet ('sha256-…').
var StyleHash = func() string {
	sum := sha256.Sum256([]byte(style))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}()

// ContentSecurityPolicy is the policy the page is served with: no script at all, its own
// inline style only, framed by the console of the same origin only.
var ContentSecurityPolicy = "default-src 'none'; style-src " + StyleHash + "; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'self'"

//go:embed report.html
var pageSource string

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"num":  func(v int64) string { return group(v) },
	"secs": secs,
	"at":   func(t *time.Time) string { return stamp(t) },
	"time": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") + " UTC" },
	"pct": func(f *float64) string {
		if f == nil {
			return "–"
		}
		return strconv.FormatFloat(*f*100, 'f', 1, 64) + " %"
	},
	"kinds": func() []string { return history.RefusalKinds },
	"kindName": func(k string) string {
		return map[string]string{history.RefusedRateLimit: "Rate limits", history.RefusedChallenge: "Challenge",
			history.RefusedIdentity: "Identity", history.RefusedShared: "Shared admission"}[k]
	},
	"style": func() template.CSS { return template.CSS(style) },
	"chart": chart,
	"deref": func(p *int64) int64 { return *p },
	"total": func(m map[string]int64) int64 {
		var n int64
		for _, v := range m {
			n += v
		}
		return n
	},
}).Parse(pageSource))

// HTML writes the report as a page that stands alone (no script, its style inline).
func HTML(w io.Writer, r Report) error { return page.Execute(w, r) }

// CSV writes the report as CSV: a table of the figures ("figure,value"), a blank line, then
// the timeline, a row per step with its header. Times are RFC 3339 (UTC), durations seconds;
// an empty cell is a figure that cannot be told.
func CSV(w io.Writer, r Report) error {
	c := csv.NewWriter(w)
	opt := func(f *float64) string {
		if f == nil {
			return ""
		}
		return strconv.FormatFloat(*f, 'f', -1, 64)
	}
	ts := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	capacity := ""
	if r.Capacity != nil {
		capacity = i(*r.Capacity)
	}
	figures := [][]string{{"figure", "value"},
		{"event_id", r.EventID}, {"name", textCell(r.Name)}, {"made_at", r.MadeAt.Format(time.RFC3339Nano)},
		{"from", ts(r.From)}, {"to", ts(r.To)}, {"span_s", i(r.SpanS)},
		{"arrivals", i(r.Arrivals)}, {"first_arrival", ts(r.FirstArrival)}, {"admitted", i(r.Admitted)},
		{"left_waiting", i(r.LeftWaiting)}, {"unclaimed", i(r.Unclaimed)}, {"abandonment", opt(r.Abandonment)},
		{"time_in_line_count", i(r.TimeInLine.Count)}, {"time_in_line_p50_s", opt(r.TimeInLine.P50S)},
		{"time_in_line_p90_s", opt(r.TimeInLine.P90S)}, {"peak_waiting", i(r.PeakWaiting)},
		{"capacity", capacity}, {"sold", i(r.Sold)}, {"sold_out", strconv.FormatBool(r.SoldOut)},
		{"sold_out_at", ts(r.SoldOutAt)}, {"sell_out_s", opt(r.SellOutS)},
		{"rejected", i(r.Rejected)}, {"unavailable", i(r.Unavailable)}}
	for _, k := range history.RefusalKinds {
		figures = append(figures, []string{"refused_" + k, i(r.Refusals[k])})
	}
	if err := c.WriteAll(figures); err != nil {
		return err
	}
	head := []string{"start", "arrivals", "admitted", "left_waiting", "unclaimed", "waiting_max", "sold",
		"time_in_line_count", "time_in_line_p50_s", "time_in_line_p90_s"}
	for _, k := range history.RefusalKinds {
		head = append(head, "refused_"+k)
	}
	rows := [][]string{{}, head}
	for _, row := range r.Timeline {
		til := []string{"", "", ""}
		if row.TimeInLine != nil {
			til = []string{i(row.TimeInLine.Count), opt(row.TimeInLine.P50S), opt(row.TimeInLine.P90S)}
		}
		line := append([]string{row.Start.UTC().Format(time.RFC3339), i(row.Arrivals), i(row.Admitted), i(row.LeftWaiting),
			i(row.Unclaimed), i(row.WaitingMax), i(row.Sold)}, til...)
		for _, k := range history.RefusalKinds {
			line = append(line, i(row.Refusals[k]))
		}
		rows = append(rows, line)
	}
	// WriteAll writes an empty record as an empty line: the blank line between the tables.
	return c.WriteAll(rows)
}

// textCell is free text for a CSV cell that a spreadsheet opens: a text starting with = + - @
// or a tab or carriage return would be read as a formula (=HYPERLINK(…) in an event's name,
// CSV injection), so it gets a leading ' that shows it as text (OWASP, "CSV Injection"). So
// does each part that a spreadsheet splitting on another separator would make a cell of: a
// formula character after a ; , | or tab (and any spaces), as in "Sale;=cmd|…" opened where
// ; separates cells. Spaces before a formula character at the start count as after a
// separator: a spreadsheet that trims a cell's spaces would read "  =SUM(…)" as a formula.
func textCell(s string) string {
	var b strings.Builder
	if s != "" && (s[0] == '\t' || s[0] == '\r') {
		b.WriteByte('\'')
	}
	part := true // at the start, or after a separator, and the spaces after it
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case strings.IndexByte(";,|\t", c) >= 0:
			part = true
		case part && c == ' ':
		case part && strings.IndexByte("=+-@", c) >= 0:
			b.WriteByte('\'')
			part = false
		default:
			part = false
		}
		b.WriteByte(c)
	}
	return b.String()
}

// group writes v with thin groups of thousands (12 345).
func group(v int64) string {
	s := strconv.FormatInt(v, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString("\u202f")
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// secs says a duration in seconds for people ("–" for none).
func secs(f *float64) string {
	if f == nil {
		return "–"
	}
	s := *f
	switch {
	case s < 60:
		return strconv.FormatFloat(s, 'f', 1, 64) + " s"
	case s < 3600:
		return fmt.Sprintf("%d min %02d s", int(s)/60, int(s)%60)
	}
	return fmt.Sprintf("%d h %02d min", int(s)/3600, int(s)%3600/60)
}

func stamp(t *time.Time) string {
	if t == nil {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05.0") + " UTC"
}

// bar is one bar of the timeline chart.
type bar struct {
	X, Y, W, H float64
	Title      string
}

// chartData is the timeline chart: a bar per step for the arrivals, and the peak line.
type chartData struct {
	W, H      float64
	Bars      []bar
	Line      string // points of the longest line, per step
	MaxArr    int64
	MaxWait   int64
	From, To  string
	HasPoints bool
}

// chart lays out the timeline as an SVG chart (no script: the page draws itself).
func chart(r Report) chartData {
	const w, h, l, b, t = 720.0, 180.0, 8.0, 20.0, 8.0
	d := chartData{W: w, H: h}
	n := len(r.Timeline)
	if n == 0 {
		return d
	}
	d.HasPoints = true
	for _, row := range r.Timeline {
		d.MaxArr = max(d.MaxArr, row.Arrivals)
		d.MaxWait = max(d.MaxWait, row.WaitingMax)
	}
	step := (w - 2*l) / float64(n)
	var pts []string
	for i, row := range r.Timeline {
		x := l + float64(i)*step
		bh := 0.0
		if d.MaxArr > 0 {
			bh = (h - b - t) * float64(row.Arrivals) / float64(d.MaxArr)
		}
		d.Bars = append(d.Bars, bar{X: x + step*0.1, Y: h - b - bh, W: math.Max(step*0.8, 0.5), H: bh,
			Title: row.Start.UTC().Format("15:04") + ": " + group(row.Arrivals) + " arrivals, longest line " + group(row.WaitingMax)})
		y := h - b
		if d.MaxWait > 0 {
			y = h - b - (h-b-t)*float64(row.WaitingMax)/float64(d.MaxWait)
		}
		pts = append(pts, strconv.FormatFloat(x+step/2, 'f', 1, 64)+","+strconv.FormatFloat(y, 'f', 1, 64))
	}
	if len(pts) == 1 {
		pts = append(pts, pts[0])
	}
	d.Line = strings.Join(pts, " ")
	d.From = r.Timeline[0].Start.UTC().Format("2006-01-02 15:04")
	d.To = r.Timeline[n-1].Start.UTC().Format("15:04") + " UTC"
	return d
}
