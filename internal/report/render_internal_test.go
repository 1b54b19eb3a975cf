package report

import "testing"

// TestTextCell: a formula character gets a ' where a spreadsheet would start a cell with it:
// at the start, and after a separator another locale splits on (; , | tab), spaces between
// (at the start too: a spreadsheet may trim them); other text is as it was.
func TestTextCell(t *testing.T) {
	for in, want := range map[string]string{
		"Spring sale":             "Spring sale",
		"=HYPERLINK(\"x\")":       "'=HYPERLINK(\"x\")",
		"@SUM(1)":                 "'@SUM(1)",
		"\t=1":                    "'\t'=1",
		"Sale;=cmd|' /C calc'!A0": "Sale;'=cmd|' /C calc'!A0",
		"Sale; +1":                "Sale; '+1",
		"a,-2|@3\t=4":             "a,'-2|'@3\t'=4",
		"Concert; Day 2, 3-4 pm":  "Concert; Day 2, 3-4 pm",
		"x=1;y":                   "x=1;y",
		"  =SUM(A1)":              "  '=SUM(A1)",
		"\r=1":                    "'\r=1",
		"":                        "",
	} {
		if got := textCell(in); got != want {
			t.Errorf("textCell(%q) = %q, want %q", in, got, want)
		}
	}
}
