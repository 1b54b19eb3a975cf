package httpjson

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReadJSON: every request body is held to one set of rules (issue 20: some endpoints
// matched member names case-insensitively, {"MAX_ACTIVE":42} was max_active and
// {"Paused":true,"paused":false} took a variant): exact names, a name given twice is malformed,
// unknown members refused, also in nested objects.
func TestReadJSON(t *testing.T) {
	type limits struct {
		JoinsPerClient *int64 `json:"joins_per_client"`
	}
	type body struct {
		UserID    string  `json:"user_id"`
		Challenge string  `json:"challenge"`
		Paused    bool    `json:"paused"`
		Limits    *limits `json:"limits"`
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
		{"another case", `{"User_ID":"u"}`, true, 422, `unknown field "User_ID"`},
		{"upper case", `{"USER_ID":"u"}`, true, 422, `unknown field "USER_ID"`},
		{"a variant beside the name", `{"Paused":true,"paused":false}`, true, 422, `unknown field "Paused"`},
		{"nested unknown", `{"limits":{"joins_per_klient":1}}`, true, 422, `unknown field "limits.joins_per_klient"`},
		{"nested another case", `{"limits":{"Joins_Per_Client":1}}`, true, 422, `unknown field "limits.Joins_Per_Client"`},
		{"nested wrong type", `{"limits":{"joins_per_client":"1"}}`, true, 422, "field limits.joins_per_client must be an integer"},
		{"twice, nested", `{"limits":{"joins_per_client":1,"joins_per_client":2}}`, true, 400, "JSON"},
		{"invalid UTF-8", "{\"user_id\":\"\xff\"}", true, 400, "JSON"},
		{"wrong type", `{"user_id":5}`, true, 422, "field user_id must be a string"},
		{"malformed", `{"user_id":`, true, 400, "JSON"},
		{"twice", `{"user_id":"a","user_id":"b"}`, true, 400, "JSON"},
		{"trailing data", `{"user_id":"a"} {}`, true, 400, "JSON"},
		{"not an object", `[1]`, true, 422, "must be an object"},
		{"null", ` null `, true, 422, "must be an object"},
		{"not an object, malformed", `[`, true, 400, "not one JSON value"},
		{"too large", `{"user_id":"` + strings.Repeat("x", 100) + `"}`, true, 413, "at most 64 bytes"},
	} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/", strings.NewReader(c.in))
		var b body
		ok := ReadJSON(w, r, 64, &b, c.empty)
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

// TestReadJSONBodyLength: a body whose Content-Length is over the limit is refused at once,
// unread (it may never come); one that stops short of its length is 408 body_timeout when the
// read deadline ends it, and says so without the connection's addresses.
func TestReadJSONBodyLength(t *testing.T) {
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/", unread{t})
	r.ContentLength = 65
	require.False(t, ReadJSON(w, r, 64, &map[string]any{}, true))
	require.Equal(t, 413, w.Code)
	require.Contains(t, w.Body.String(), `"code":"body_too_large"`)
	require.Equal(t, "close", w.Header().Get("Connection"), "the rest is not waited for")

	w = httptest.NewRecorder()
	r = httptest.NewRequest("POST", "/", io.MultiReader(strings.NewReader("{"), failing{&net.OpError{Op: "read", Net: "tcp",
		Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, Err: os.ErrDeadlineExceeded}}))
	r.ContentLength = 40
	require.False(t, ReadJSON(w, r, 64, &map[string]any{}, true))
	require.Equal(t, 408, w.Code)
	require.Contains(t, w.Body.String(), `"code":"body_timeout"`)
	require.NotContains(t, w.Body.String(), "127.0.0.1")
	require.Equal(t, "close", w.Header().Get("Connection"))

	w = httptest.NewRecorder()
	r = httptest.NewRequest("POST", "/", strings.NewReader("{"))
	r.ContentLength = 40
	require.False(t, ReadJSON(w, r, 64, &map[string]any{}, true))
	require.Equal(t, 400, w.Code)
	require.Contains(t, w.Body.String(), `"code":"malformed_request"`, "a body cut short is framing, as at the gate")
	require.Equal(t, "close", w.Header().Get("Connection"))
}

// unread is a body the test fails on reading.
type unread struct{ t *testing.T }

func (u unread) Read([]byte) (int, error) {
	u.t.Error("the body was read")
	return 0, io.EOF
}

// failing is a body whose read fails with err.
type failing struct{ err error }

func (f failing) Read([]byte) (int, error) { return 0, f.err }

// TestDecodeJSONPatch: a JSON Merge Patch is read as a map of raw values (PATCH
// /v1/events/{event_id}); a name given twice is malformed at any depth, so a patch cannot say
// two things of one field and leave the choice to the decoder.
func TestDecodeJSONPatch(t *testing.T) {
	for _, c := range []struct {
		in     string
		status int // 0 = decoded
	}{
		{`{"max_active":3,"challenge":{"secret":"s"}}`, 0},
		{`{"max_active":3,"max_active":4}`, 400},
		{`{"challenge":{"secret":"a","secret":"b"}}`, 400},
		{`[1]`, 422},
	} {
		w := httptest.NewRecorder()
		var patch map[string]json.RawMessage
		ok := DecodeJSON(w, []byte(c.in), &patch)
		if ok != (c.status == 0) || (!ok && w.Code != c.status) {
			t.Errorf("%s: ok %v, %d %s; want %d", c.in, ok, w.Code, w.Body, c.status)
		}
	}
}

// TestQuery: a query string that does not decode, or a named parameter given twice or empty,
// is 400 invalid_query, where url.URL.Query would drop the one, pick the first of the other,
// and read the last as absent.
func TestQuery(t *testing.T) {
	for _, c := range []struct {
		query string
		ok    bool
	}{
		{"limit=5&before=3", true},
		{"", true},
		{"other=1&other=2", true}, // not one of the names read
		{"limit=%zz", false},
		{"limit=1;before=2", false},
		{"limit=1&limit=abc", false},
		{"limit=", false},
		{"limit", false},
		{"limit=5&before=", false},
		{"other=", true},
	} {
		w := httptest.NewRecorder()
		q, ok := Query(w, httptest.NewRequest("GET", "/?"+c.query, nil), "limit", "before")
		require.Equal(t, c.ok, ok, c.query)
		if !c.ok {
			require.Equal(t, 400, w.Code, c.query)
			require.Contains(t, w.Body.String(), `"code":"invalid_query"`, c.query)
			continue
		}
		if c.query == "limit=5&before=3" {
			require.Equal(t, "5", q.Get("limit"))
		}
	}
}

func TestOnlyValue(t *testing.T) {
	h := http.Header{}
	v, ok := OnlyValue(h, "X-Original-URI", "X-Forwarded-Uri")
	require.True(t, ok)
	require.Empty(t, v)
	h.Set("X-Original-Uri", "/a")
	v, ok = OnlyValue(h, "X-Original-URI", "X-Forwarded-Uri")
	require.True(t, ok, "names are canonicalised")
	require.Equal(t, "/a", v)
	h.Set("X-Forwarded-Uri", "/a")
	_, ok = OnlyValue(h, "X-Original-URI", "X-Forwarded-Uri")
	require.False(t, ok, "two headers, even agreeing")
	h = http.Header{"Idempotency-Key": []string{"k", "k"}}
	_, ok = OnlyValue(h, "Idempotency-Key")
	require.False(t, ok, "one header given twice")
}

// closeRecorder is a request body that records its Close.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

// TestReadBodyCloses: a body read to its end is closed, so that http.Server does not copy
// what is left of it to io.Discard before the answer (writeHeader); one refused is left to the
// server.
func TestReadBodyCloses(t *testing.T) {
	const body = `{"challenge":"c"}`
	for length, closed := range map[int64]bool{int64(len(body)): true, -1: true, int64(len(body)) + 5: false} {
		rec := &closeRecorder{Reader: strings.NewReader(body)}
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Body, r.ContentLength = rec, length
		got, ok := ReadBody(httptest.NewRecorder(), r, 1<<10, false)
		require.Equal(t, closed, ok, "Content-Length %d", length)
		require.Equal(t, closed, rec.closed, "Content-Length %d", length)
		if ok {
			require.Equal(t, body, string(got))
		}
	}
}

// TestBadlyChunkedBody: a body whose chunked framing does not parse, read by a real
// http.Server, is 400 malformed_request (BrokenBody), what the gate answers for it too, and the
// connection ends.
func TestBadlyChunkedBody(t *testing.T) {
	resp := readBodyAnswer(t, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":1}\r\n0\r\n\r\n")
	require.Equal(t, 400, resp.StatusCode)
	var p struct{ Code, Detail string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	require.Equal(t, "malformed_request", p.Code)
	require.Equal(t, BrokenBody().Detail, p.Detail)
	require.True(t, resp.Close, "the connection ends after the refusal")
}

// TestReadBodyRefusalIsPrompt: a body declared larger than the limit but within what
// http.Server would read to keep the connection (256 KiB), and never sent, is refused at once
// and the connection closed; before, the server waited for the body first (up to the body's
// read deadline: 10 s on the API; none here, so the answer would never come).
func TestReadBodyRefusalIsPrompt(t *testing.T) {
	resp := readBodyAnswer(t, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 30007\r\n\r\n")
	require.Equal(t, 413, resp.StatusCode, "answered before the body")
	require.True(t, resp.Close, "the connection ends after the refusal")
}

// readBodyAnswer sends raw on a new connection to a real http.Server whose handler calls
// ReadBody (a limit of 20 KiB), and returns its answer (read within 20 s).
func readBodyAnswer(t *testing.T, raw string) *http.Response {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = ReadBody(w, r, 20<<10, false)
	}))
	t.Cleanup(srv.Close)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = io.WriteString(c, raw)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second))) // a bound, not a wait
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}
