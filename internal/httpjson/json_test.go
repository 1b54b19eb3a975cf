package httpjson

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReadSmallJSON: the v2 decoding of a hot path's body answers ReadJSON's problems (and
// refuses what v2 refuses: a member given twice, a name in another case).
func TestReadSmallJSON(t *testing.T) {
	type body struct {
		UserID    string `json:"user_id"`
		Challenge string `json:"challenge"`
	}
	for _, c := range []struct {
		name, in string
		empty    bool
		status   int    // 0 = decoded
		detail   string // a part of the problem's detail
	}{
		{"object", `{"user_id":"u","challenge":"c"}`, true, 0, ""},
		{"empty allowed", " ", true, 0, ""},
		{"empty refused", "", false, 400, "a JSON body is required"},
		{"unknown member", `{"user_id":"u","nope":1}`, true, 422, `unknown field "nope"`},
		{"another case", `{"User_ID":"u"}`, true, 422, "unknown field"},
		{"wrong type", `{"user_id":5}`, true, 422, "field user_id must be a string"},
		{"malformed", `{"user_id":`, true, 400, "JSON"},
		{"twice", `{"user_id":"a","user_id":"b"}`, true, 400, "JSON"},
		{"trailing data", `{"user_id":"a"} {}`, true, 400, "JSON"},
		{"not an object", `[1]`, true, 422, "must be an object"},
		{"not an object, malformed", `[`, true, 400, "not one JSON value"},
		{"too large", `{"user_id":"` + strings.Repeat("x", 100) + `"}`, true, 413, "at most 64 bytes"},
	} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/", strings.NewReader(c.in))
		var b body
		ok := ReadSmallJSON(w, r, 64, &b, c.empty)
		if c.status == 0 {
			if !ok {
				t.Errorf("%s: refused: %s", c.name, w.Body)
			}
			continue
		}
		var p struct{ Detail string }
		_ = json.Unmarshal(w.Body.Bytes(), &p)
		if ok || w.Code != c.status || !strings.Contains(p.Detail, c.detail) {
			t.Errorf("%s: ok %v, %d %q; want %d with %q", c.name, ok, w.Code, p.Detail, c.status, c.detail)
		}
	}
}
