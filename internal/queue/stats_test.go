package queue

import "testing"

// TestSeqMark: a checkpoint records the last number, but not past void numbers of a resume still
// ahead of serving (helper-83: a second loss took them for waiting tickets).
func TestSeqMark(t *testing.T) {
	for _, c := range []struct {
		name string
		st   Stats
		want int64
	}{
		{"no resume", Stats{LastNumber: 27, Serving: 3}, 27},
		{"void ahead of serving", Stats{LastNumber: 1027, Serving: 2, VoidFrom: 7, VoidTo: 1024, VoidLeft: 1018}, 6},
		{"some void reclaimed", Stats{LastNumber: 1027, Serving: 9, VoidFrom: 7, VoidTo: 1024, VoidLeft: 1010}, 6},
		{"serving passed the void", Stats{LastNumber: 1300, Serving: 1024, VoidFrom: 7, VoidTo: 1024, VoidLeft: 900}, 1300},
		{"every void number reclaimed", Stats{LastNumber: 1027, Serving: 2}, 1027},
	} {
		if got := c.st.SeqMark(); got != c.want {
			t.Errorf("%s: SeqMark %d, want %d", c.name, got, c.want)
		}
	}
}
