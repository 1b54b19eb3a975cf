package httpapi

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/httpjson"
)

// TestVersionMismatchProblem: a 412 names the current version in its ETag and body, and has
// no ETag when the event does not exist.
func TestVersionMismatchProblem(t *testing.T) {
	for _, c := range []struct {
		current int64
		etag    string
	}{{3, `"3"`}, {0, ""}} {
		p, ok := eventProblems.Problem(&event.VersionError{Current: c.current}, "concert")
		if !ok {
			t.Fatal("no rule")
		}
		w := httptest.NewRecorder()
		httpjson.WriteProblem(w, p)
		var body struct {
			Code    string `json:"code"`
			Current int64  `json:"current_version"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if w.Code != 412 || body.Code != "precondition_failed" || body.Current != c.current || w.Header().Get("ETag") != c.etag {
			t.Errorf("current %d: %d %+v ETag %q", c.current, w.Code, body, w.Header().Get("ETag"))
		}
	}
}
