// Package captchatest is a fake captcha service for tests: a siteverify endpoint on a local
// httptest server that behaves as Turnstile's does for the tokens it issued.
package captchatest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Fake is a siteverify endpoint. Its tokens are single use, as the real services' are: the
// first verification with the right secret succeeds, later ones fail with
// "timeout-or-duplicate".
type Fake struct {
	// URL is the siteverify endpoint.
	URL    string
	secret string

	mu       sync.Mutex
	issued   map[string]bool // token -> spent
	requests []Request
}

// Request is one verification the fake received.
type Request struct {
	Secret, Response, RemoteIP string
}

// New starts a fake whose secret is secret; it stops when the test ends.
func New(t testing.TB, secret string) *Fake {
	f := &Fake{secret: secret, issued: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	f.URL = srv.URL + "/siteverify"
	return f
}

// Token issues a token, as a widget on a page would get one.
func (f *Fake) Token() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	tok := "fake." + hex.EncodeToString(b[:])
	f.mu.Lock()
	f.issued[tok] = false
	f.mu.Unlock()
	return tok
}

// Requests returns the verifications received so far.
func (f *Fake) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Request(nil), f.requests...)
}

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/siteverify" || r.ParseForm() != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	req := Request{Secret: r.PostForm.Get("secret"), Response: r.PostForm.Get("response"), RemoteIP: r.PostForm.Get("remoteip")}
	f.mu.Lock()
	f.requests = append(f.requests, req)
	var codes []string
	spent, known := f.issued[req.Response]
	switch {
	case req.Secret != f.secret:
		codes = []string{"invalid-input-secret"}
	case req.Response == "":
		codes = []string{"missing-input-response"}
	case !known:
		codes = []string{"invalid-input-response"}
	case spent:
		codes = []string{"timeout-or-duplicate"}
	default:
		f.issued[req.Response] = true
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"success": codes == nil, "error-codes": append([]string{}, codes...),
		"hostname": "shop.example", "challenge_ts": "2026-01-01T00:00:00.000Z"})
}
