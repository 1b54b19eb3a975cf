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
