package httpjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/waitroom/waitroom/gate"
	"github.com/waitroom/waitroom/internal/event"
)

// ReadJSON decodes a size-limited JSON body into v (DecodeJSON's rules). An empty body leaves
// v as it is when allowEmpty. It writes the problem and returns false on failure. Every request
// body of the API is read through it, so every body is held to the same rules.
func ReadJSON(w http.ResponseWriter, r *http.Request, limit int64, v any, allowEmpty bool) bool {
	body, ok := ReadBody(w, r, limit, allowEmpty)
	if !ok || body == nil {
		return ok
	}
	return DecodeJSON(w, body, v)
}

// ReadBody reads a body of at most limit bytes, for a handler that decodes it itself (with
// DecodeJSON as its fallback). body is nil (and ok true) for an empty one when allowEmpty;
// otherwise it writes the problem (413 body_too_large, 408 body_timeout, 400 malformed_request
// for a body cut short or badly chunked (BrokenBody), 400 malformed_json for an empty one)
// and returns false. A body refused before its end (too large, late, cut short) is refused
// with "Connection: close": the answer goes at once, and the connection ends after it.
// Otherwise http.Server would first read what is left of a body of up to 256 KiB, to keep the
// connection, and wait for bytes that may never come, up to the body's read deadline.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64, allowEmpty bool) (body []byte, ok bool) {
	var err error
	if r.ContentLength > limit {
		// Declared too large: refused before a byte of it is read (it may never come).
		w.Header().Set("Connection", "close")
		WriteProblem(w, NewProblem(413, "body_too_large", "the body must be at most "+strconv.FormatInt(limit, 10)+" bytes"))
		return nil, false
	}
	if n := r.ContentLength; n > 0 {
		// The length is known and within the limit (the server's reader stops at it): one
		// read into a buffer of that size.
		body = make([]byte, n)
		_, err = io.ReadFull(r.Body, body)
	} else {
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	}
	if err != nil {
		w.Header().Set("Connection", "close")
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			WriteProblem(w, NewProblem(413, "body_too_large", "the body must be at most "+strconv.FormatInt(limit, 10)+" bytes"))
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The server's read deadline for bodies (httpapi's BodyTimeout): fewer bytes came
			// than Content-Length says, or too slowly.
			WriteProblem(w, NewProblem(408, "body_timeout", "the body did not arrive in full in time (Content-Length says more than was sent?)"))
		default: // the body ended before its length, or its chunked framing is not valid
			WriteProblem(w, BrokenBody())
		}
		return nil, false
	}
	// Read to its end: closed now, so that http.Server does not look for more of it before the
	// answer (its writeHeader would copy the rest to io.Discard: a LimitReader and a pooled
	// buffer a request).
	_ = r.Body.Close()
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return nil, true
		}
		WriteProblem(w, NewProblem(400, "malformed_json", "a JSON body is required"))
		return nil, false
	}
	return body, true
}

// DecodeJSON decodes the JSON document body into v with the rules of encoding/json/v2 (its
// prototype github.com/go-json-experiment/json, by the Go team; the standard library's
// encoding/json/v2 behind GOEXPERIMENT=jsonv2): member names match exactly, never in another
// case ({"MAX_ACTIVE": 42} is an unknown field, not max_active); an unknown member is refused;
// a name given twice, invalid UTF-8 or trailing data make the body malformed. v1's
// case-insensitive matching let {"Paused": true, "paused": false} take either variant. It is
// also a sixth of v1's time for a join's body (1.2 µs against 7.3 µs, one allocation instead
// of twelve). It writes the problem (400 malformed_json, 422 invalid_field) and returns false
// on failure.
func DecodeJSON(w http.ResponseWriter, body []byte, v any) bool {
	err := jsonv2.Unmarshal(body, v, rejectUnknown)
	var se *jsonv2.SemanticError
	switch {
	case err == nil && jsontext.Value(body).Kind() == 'n' && isObject(v):
		// null decodes into a struct or map as nothing at all: refused like any other
		// document that is not an object, not taken for an empty one.
		WriteProblem(w, NewProblem(422, "invalid_field", "the body must be an object"))
	case err == nil:
		return true
	case !jsontext.Value(body).IsValid():
		// Malformed JSON is 400 whatever v2 met first (an array where an object belongs is
		// a semantic error to it before the missing bracket).
		WriteProblem(w, NewProblem(400, "malformed_json", "the body is not one JSON value (RFC 8259, member names once each)"))
	case errors.As(err, &se) && errors.Is(se.Err, jsonv2.ErrUnknownName):
		WriteProblem(w, NewProblem(422, "invalid_field", "unknown field "+strconv.Quote(fieldName(se.JSONPointer))))
	case errors.As(err, &se) && se.GoType != nil && se.JSONPointer == "":
		WriteProblem(w, NewProblem(422, "invalid_field", "the body must be "+jsonKind(se.GoType)))
	case errors.As(err, &se) && se.GoType != nil:
		WriteProblem(w, NewProblem(422, "invalid_field", "field "+fieldName(se.JSONPointer)+" must be "+jsonKind(se.GoType)))
	default:
		WriteProblem(w, NewProblem(400, "malformed_json", "the body is not one JSON object of the expected shape: "+err.Error()))
	}
	return false
}

// isObject reports whether v points to what a JSON object decodes into (a struct or a map).
func isObject(v any) bool {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer {
		return false
	}
	k := t.Elem().Kind()
	return k == reflect.Struct || k == reflect.Map
}

// rejectUnknown is DecodeJSON's option, made once.
var rejectUnknown = jsonv2.RejectUnknownMembers(true)

// fieldName is a JSON pointer (RFC 6901) as the API's details name a field: "/limits/x" is
// "limits.x".
func fieldName(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// jsonKind names a Go type the way a JSON client thinks of it.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct:
		if t.String() == "time.Time" {
			return "an RFC 3339 time"
		}
		return "an object"
	case reflect.Map:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return t.String()
}

// WriteJSON writes v as the JSON body of a response with status code (no-store).
func WriteJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		WriteProblem(w, NewProblem(500, "internal_error", "could not encode the response"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// Bearer returns the token of the request's one "Authorization: Bearer <token>" header, and
// false without one: the rule of gate.BearerToken, which the gate middleware applies in front of
// an origin (no Authorization field, another scheme, an empty token, or more than one
// Authorization field: with two, which one a proxy in front reads and which one the service
// reads would be a guess). Every route reads its bearer here, so a request with two fields is
// refused as one without.
func Bearer(r *http.Request) (string, bool) { return gate.BearerToken(r) }

// EventID returns the request's {event_id} path value, or writes 400 invalid_event_id and
// returns false when it is not a valid event id (event.ValidID).
func EventID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("event_id")
	if !event.ValidID(id) {
		WriteProblem(w, NewProblem(400, "invalid_event_id", "event ids match "+event.IDRule))
		return "", false
	}
	return id, true
}

// TimeLayout is how the API writes times: RFC 3339 with milliseconds, in UTC.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// PathID reads the path value name and checks it is at most max bytes of event.ValidText; otherwise
// it writes a 400 problem (code invalid_id) and returns false.
func PathID(w http.ResponseWriter, r *http.Request, name string, max int) (string, bool) {
	v := r.PathValue(name)
	if len(v) > max || !event.ValidText(v) {
		WriteProblem(w, NewProblem(400, "invalid_id", name+" must be at most "+strconv.Itoa(max)+" bytes of UTF-8 text without control characters"))
		return "", false
	}
	return v, true
}

// Query parses r's query string strictly, where url.URL.Query drops what it cannot decode (a
// malformed ?limit=%zz read as no limit): a query string that does not decode, one of names
// given more than once (which one counts would be a guess), or one of names given empty
// (?event_id= from a script whose variable was unset: read as absent, it would answer for
// every event) answers 400 invalid_query and returns false.
func Query(w http.ResponseWriter, r *http.Request, names ...string) (url.Values, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		WriteProblem(w, NewProblem(400, "invalid_query", "the query string does not decode (a % not followed by two hex digits, or a ;)"))
		return nil, false
	}
	for _, n := range names {
		switch v := q[n]; {
		case len(v) > 1:
			WriteProblem(w, NewProblem(400, "invalid_query", n+" is given "+strconv.Itoa(len(v))+" times: give it once"))
			return nil, false
		case len(v) == 1 && v[0] == "":
			WriteProblem(w, NewProblem(400, "invalid_query", n+" is empty: give it a value, or leave it out"))
			return nil, false
		}
	}
	return q, true
}

// OnlyValue returns the one value the named headers carry together (each may be absent): ""
// and true when none does, false when more than one value is given (two headers, or one given
// twice), even if they agree: which one a request meant would be a guess.
func OnlyValue(h http.Header, names ...string) (string, bool) {
	var v string
	n := 0
	for _, name := range names {
		for _, x := range h.Values(name) {
			v = x
			n++
		}
	}
	return v, n <= 1
}
