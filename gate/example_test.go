package gate_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/waitroom/waitroom/gate"
)

// exampleRoom stands in for a waiting room: it publishes one Ed25519 key at
// /.well-known/jwks.json and mints admission tokens as the real one does.
type exampleRoom struct {
	*httptest.Server
	priv ed25519.PrivateKey
}

func newExampleRoom() *exampleRoom {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	jwks := fmt.Sprintf(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":%q,"kid":"k1","alg":"EdDSA","use":"sig"}]}`,
		base64.RawURLEncoding.EncodeToString(pub))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/jwks.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Header().Set("Cache-Control", "public, max-age=300")
		io.WriteString(w, jwks)
	})
	return &exampleRoom{Server: httptest.NewServer(mux), priv: priv}
}

// mint signs an admission token of ticket number num in event, ending in 5 minutes.
func (r *exampleRoom) mint(event string, num int64) string {
	now := time.Now()
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
		"iss": "waitroom", "sub": fmt.Sprintf("ticket-%d", num), "evt": event, "num": num,
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
	})
	t.Header["kid"] = "k1"
	s, _ := t.SignedString(r.priv)
	return s
}

// Protect a handler: visitors without an admission are sent to the line, admitted ones reach
// the handler with their admission in the request's context.
func Example() {
	room := newExampleRoom()
	defer room.Close()

	g, err := gate.New(gate.Config{WaitingRoomURL: room.URL, EventID: "concert"})
	if err != nil {
		panic(err)
	}
	defer g.Close()
	checkout := g.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := gate.FromContext(r.Context())
		fmt.Fprintf(w, "checkout for ticket #%d", a.Number)
	}))

	// A browser without an admission goes to the waiting-room page, which sends it back to the
	// page it asked for (return_url) once admitted.
	req := httptest.NewRequest("GET", "https://shop.example/checkout", nil)
	req.Header.Set("Accept", "text/html")
	rec := httptest.NewRecorder()
	checkout.ServeHTTP(rec, req)
	fmt.Println(rec.Code, strings.TrimPrefix(rec.Header().Get("Location"), room.URL))

	// The waiting-room page sends the admitted person back with ?waitroom_token=…: the gate
	// keeps the token in a cookie and drops it from the address.
	tok := room.mint("concert", 42)
	req = httptest.NewRequest("GET", "https://shop.example/checkout?waitroom_token="+tok, nil)
	rec = httptest.NewRecorder()
	checkout.ServeHTTP(rec, req)
	cookie := rec.Result().Cookies()[0]
	fmt.Println(rec.Code, rec.Header().Get("Location"), cookie.Name, cookie.HttpOnly, cookie.Secure)

	// The next request carries the cookie.
	req = httptest.NewRequest("GET", "https://shop.example/checkout", nil)
	req.AddCookie(cookie)
	rec = httptest.NewRecorder()
	checkout.ServeHTTP(rec, req)
	fmt.Println(rec.Code, rec.Body)

	// An API call without an admission gets a problem document.
	req = httptest.NewRequest("POST", "https://shop.example/api/orders", nil)
	rec = httptest.NewRecorder()
	checkout.ServeHTTP(rec, req)
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"), strings.Contains(rec.Body.String(), `"code":"admission_required"`))

	// Output:
	// 303 /e/concert?return_url=https%3A%2F%2Fshop.example%2Fcheckout
	// 303 /checkout waitroom_admission_concert true true
	// 200 checkout for ticket #42
	// 401 application/problem+json true
}

// Verify checks a token outside a request, e.g. on a WebSocket or in a queue consumer.
func ExampleGate_Verify() {
	room := newExampleRoom()
	defer room.Close()
	g, err := gate.New(gate.Config{WaitingRoomURL: room.URL, EventID: "concert"})
	if err != nil {
		panic(err)
	}
	defer g.Close()

	a, err := g.Verify(context.Background(), room.mint("concert", 7))
	fmt.Println(a.Event, a.TicketID, a.Number, err)

	_, err = g.Verify(context.Background(), room.mint("other-event", 7))
	fmt.Println(err)
	// Output:
	// concert ticket-7 7 <nil>
	// gate: invalid admission token: another event "other-event"
}

// A handler behind the gate reads the visitor's admission from the context; its tests can put
// one there with NewContext.
func ExampleFromContext() {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := gate.FromContext(r.Context())
		if !ok {
			http.Error(w, "not behind the gate", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "ticket #%d of %s", a.Number, a.Event)
	})

	req := httptest.NewRequest("GET", "/checkout", nil)
	req = req.WithContext(gate.NewContext(req.Context(), gate.Admission{Event: "concert", Number: 3}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	fmt.Println(rec.Body)
	// Output: ticket #3 of concert
}
