package chaos

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Row is one scenario's line of the table.
type Row struct {
	Scenario string
	// Verdicts are in the order of Invariants; nil when the scenario could not run (Err).
	Verdicts []Verdict
	// Recovery is the time from the fault's end to the end of the first fully successful probe
	// round; Recovered false when none came within Bound.
	Recovery  time.Duration
	Recovered bool
	Bound     time.Duration
	// Err is why the scenario could not run to its checks (a harness failure, not a verdict).
	Err string
	// Activity is what the clients did, from their histories.
	Activity Activity
}

// Activity counts what the clients of one scenario did, so that a table of "held" can be told
// apart from a run in which nothing happened.
type Activity struct {
	Requests, Joined, Admitted, Booked, Entered, Issued, Samples int
	// Status503 counts 503 answers; NoAnswer requests without an answer (refused, reset,
	// timed out; not the ones the run cancelled).
	Status503, NoAnswer int
	// StillWaiting counts line users whose last answer was QUEUED when the run stopped them.
	StillWaiting int
	// SlowestIssue is the longest time an entrant waited from sending its entry to being shown
	// ISSUED (issuance's recovery, which the probe round does not wait for).
	SlowestIssue time.Duration
}

func (a Activity) String() string {
	return fmt.Sprintf("%d requests (%d 503s, %d unanswered): %d joined, %d admitted, %d booked, %d still waiting at the end; %d entered, %d issued (slowest after %.1fs); %d samples",
		a.Requests, a.Status503, a.NoAnswer, a.Joined, a.Admitted, a.Booked, a.StillWaiting, a.Entered, a.Issued, a.SlowestIssue.Seconds(), a.Samples)
}

// activity counts the clients' histories.
func activity(hs []*History) Activity {
	var a Activity
	for _, h := range hs {
		var joined, admitted, booked, entered, issued bool
		last := ""
		var entrySent time.Time
		for _, x := range h.Exchanges {
			if x.Kind == "entry" && entrySent.IsZero() {
				entrySent = x.Sent
			}
			if !issued && x.EntryStatus == stIssued && answered2xx(x) && !entrySent.IsZero() {
				a.SlowestIssue = max(a.SlowestIssue, x.Recv.Sub(entrySent))
			}
			if x.Kind != "push" {
				a.Requests++
			}
			if x.Code == 503 {
				a.Status503++
			}
			if x.Code == 0 && x.Failure != "cancelled" && x.Failure != "" {
				a.NoAnswer++
			}
			ok := answered2xx(x)
			if (x.Kind == "join" || x.Kind == "status") && ok || x.Kind == "push" {
				last = x.Status
			}
			switch {
			case x.Kind == "join" && ok:
				joined = true
				admitted = admitted || x.Status == stAdmitted
			case (x.Kind == "status" && ok || x.Kind == "push") && x.Status == stAdmitted:
				admitted = true
			case x.Kind == "book" && ok:
				booked = true
			case x.Kind == "entry" && ok:
				entered = true
				issued = issued || x.EntryStatus == stIssued
			case x.Kind == "entry_status" && ok && x.EntryStatus == stIssued:
				issued = true
			case x.Kind == "event" && ok:
				a.Samples++
			}
		}
		if last == stQueued {
			a.StillWaiting++
		}
		for _, c := range []struct {
			b bool
			n *int
		}{{joined, &a.Joined}, {admitted, &a.Admitted}, {booked, &a.Booked}, {entered, &a.Entered}, {issued, &a.Issued}} {
			if c.b {
				*c.n++
			}
		}
	}
	return a
}

// Failed reports whether the row breaks an invariant, did not recover, or did not run.
func (r Row) Failed() bool {
	if r.Err != "" || !r.Recovered {
		return true
	}
	for _, v := range r.Verdicts {
		if v.Count > 0 {
			return true
		}
	}
	return false
}

func (r Row) recoveryCell() string {
	switch {
	case r.Err != "":
		return "-"
	case !r.Recovered:
		return fmt.Sprintf("NOT within %s", r.Bound)
	}
	return fmt.Sprintf("%.1fs", r.Recovery.Seconds())
}

// WriteTable prints the scenario × invariant table: each cell "held" or "FAIL n" (the
// violations' count), the recovery time, then one line per violation with its description.
func WriteTable(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"scenario"}
	for _, inv := range Invariants {
		head = append(head, inv.Name)
	}
	head = append(head, "recovery")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rows {
		cells := []string{r.Scenario}
		for i := range Invariants {
			switch {
			case r.Err != "":
				cells = append(cells, "-")
			case r.Verdicts[i].Count == 0:
				cells = append(cells, "held")
			default:
				cells = append(cells, fmt.Sprintf("FAIL %d", r.Verdicts[i].Count))
			}
		}
		cells = append(cells, r.recoveryCell())
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	_ = tw.Flush()
	var notes []string
	for _, r := range rows {
		if r.Err != "" {
			notes = append(notes, fmt.Sprintf("  %s: did not run: %s", r.Scenario, r.Err))
			continue
		}
		for i, v := range r.Verdicts {
			if v.Count > 0 {
				notes = append(notes, fmt.Sprintf("  %s / %s: %s", r.Scenario, Invariants[i].Name, v.Detail))
			}
		}
		if !r.Recovered {
			notes = append(notes, fmt.Sprintf("  %s / recovery: no fully successful round of requests within %s of the fault's end", r.Scenario, r.Bound))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w, "violations:")
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
}
