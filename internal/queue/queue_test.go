package queue

import (
	"testing"
	"time"
)

func TestETARate(t *testing.T) {
	for _, c := range []struct {
		name      string
		measured  float64
		maxActive int64
		ttl       time.Duration
		admitRate float64
		want      float64
	}{
		{"measured wins", 50, 100, 100 * time.Second, 0, 50},
		{"a stuck line still turns over within the session TTL", 1e-9, 100, 100 * time.Second, 0, 1},
		{"never above admit_rate", 500, 10_000, time.Second, 200, 200},
		{"no measurement yet, admit_rate caps the turnover", 0, 10_000, time.Second, 20, 20},
		{"no TTL given: the default", 0, 300, 0, 0, 1},
	} {
		if got := ETARate(c.measured, c.maxActive, c.ttl, c.admitRate); got != c.want {
			t.Errorf("%s: ETARate = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestValidEventID(t *testing.T) {
	for id, want := range map[string]bool{
		"a": true, "concert-2026_x": true, "0": true, "": false, "-a": false, "A": false,
		"a{b}": false, "a/b": false, string(make([]byte, 65)): false,
		"a234567890123456789012345678901234567890123456789012345678901234":  true,
		"a2345678901234567890123456789012345678901234567890123456789012345": false,
	} {
		if got := ValidEventID(id); got != want {
			t.Errorf("ValidEventID(%q) = %v, want %v", id, got, want)
		}
	}
}
