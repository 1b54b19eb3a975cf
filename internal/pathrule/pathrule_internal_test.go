package pathrule

import "testing"

// TestSegmentMatches: a protected segment matches itself with a suffix after "." or ":", in any
// case; a file (the last segment of a prefix without a trailing "/") also its name without one
// or more of its last extensions that are a script's or a page's; a directory, a version or a
// date never.
func TestSegmentMatches(t *testing.T) {
	for _, c := range []struct {
		core, want string
		last, ok   bool
	}{
		{"checkout", "checkout", false, true}, {"CHECKOUT.json", "checkout", false, true}, {"checkout:x", "checkout", true, true},
		{"checkouts", "checkout", true, false}, {"check", "checkout", true, false},
		{"pay", "pay.php", true, true}, {"PAY", "pay.php", true, true}, {"pay.v2", "pay.v2.php", true, true},
		{"pay", "pay.v2.php", true, false}, {"pay.v", "pay.v2.php", true, false}, {"pay.php", "pay.php", true, true},
		{"pay", "pay.php.html", true, true}, {"pay.php", "pay.php.html", true, true}, {"pay", "pay.PHP", true, true},
		{"pay.html", "pay.php", true, false}, {"pay", "pay.php", false, false}, {"v1", "v1.2", false, false},
		{"v1", "v1.2", true, false}, {"2026", "2026.12.24", true, false}, {"", ".env", true, false}, {"env", ".env", true, false},
	} {
		if got := segmentMatches(c.core, c.want, c.last); got != c.ok {
			t.Errorf("segmentMatches(%q, %q, %v) = %v", c.core, c.want, c.last, got)
		}
	}
}
