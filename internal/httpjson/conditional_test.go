package httpjson_test

import (
	"net/http/httptest"
	"testing"

	"github.com/waitroom/waitroom/internal/httpjson"
)

// TestNotModified: If-None-Match as RFC 9110 13.1.2 reads it: "*" matches any representation,
// a list matches by the weak comparison, a tag that merely contains the entity tag does not.
func TestNotModified(t *testing.T) {
	const etag = `"abc"`
	for _, tc := range []struct {
		values []string
		want   bool
	}{
		{nil, false},
		{[]string{`"abc"`}, true},
		{[]string{`*`}, true},
		{[]string{` * `}, true},
		{[]string{`W/"abc"`}, true},
		{[]string{`"x", "abc"`}, true},
		{[]string{`"x",W/"abc"`}, true},
		{[]string{`"x"`, `"abc"`}, true}, // a list split over two lines
		{[]string{`"abcd"`}, false},
		{[]string{`"xabc"`}, false},
		{[]string{`abc`}, false},
		{[]string{`"a,bc"`, `""`}, false},
		{[]string{`"x`}, false},
		{[]string{`garbage, "abc"`}, false}, // malformed: nothing past it matches
		{[]string{``}, false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		for _, v := range tc.values {
			r.Header.Add("If-None-Match", v)
		}
		if got := httpjson.NotModified(r, etag); got != tc.want {
			t.Errorf("If-None-Match %q: %v, want %v", tc.values, got, tc.want)
		}
		if got := httpjson.NotModified(r, `W/`+etag); got != tc.want {
			t.Errorf("If-None-Match %q against a weak tag: %v, want %v", tc.values, got, tc.want)
		}
	}
}
