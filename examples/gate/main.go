// Command gate is a tiny shop behind a Waitroom waiting room: its home page is public, its
// /checkout only lets in visitors the waiting room admitted (package gate).
//
//	waitroom serve --addr 127.0.0.1:8080 &
//	curl -X PUT localhost:8080/v1/events/shop -H "Authorization: Bearer $KEY" \
//	     -d '{"max_active":1,"redirect_url":"http://localhost:8090/checkout"}'
//	go run ./examples/gate --waitroom http://localhost:8080 --event shop
//
// Then open http://localhost:8090/checkout: the shop sends you to the line at
// http://localhost:8080/e/shop, whose page sends you back with ?waitroom_token=… once admitted.
// POST /checkout/done ends the purchase: the shop ends the admitted session at the waiting
// room, so the slot goes to the next in line at once. main_test.go sends 2,000 visitors
// through this shop (max_active 50) and checks what the shop sees.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/waitroom/waitroom/gate"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "listen address of the shop")
	room := flag.String("waitroom", "http://localhost:8080", "base URL of the waiting room")
	event := flag.String("event", "shop", "event id of the sale")
	online := flag.Bool("online", true, "confirm each admission with the waiting room (sends back visitors who left)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*addr, *room, *event, *online, log); err != nil {
		log.Error("shop", "err", err)
		os.Exit(1)
	}
}

var checkoutPage = template.Must(template.New("checkout").Parse(`<!doctype html>
<title>Checkout</title>
<h1>Checkout</h1>
<p>You are in: ticket #{{.Number}} of {{.Event}}; this admission token is valid until {{.Expires.Format "15:04:05 MST"}} (the session itself may last longer while you are active).</p>
`))

func run(addr, room, event string, online bool, log *slog.Logger) error {
	// Paths: what waits, decided by the waiting room's path rule over the whole site (Site), so
	// that no other spelling of /checkout ("/checkout/", "/%63heckout", "/CHECKOUT") reaches it.
	g, err := gate.New(gate.Config{WaitingRoomURL: room, EventID: event, OnlineCheck: online, Logger: log,
		Paths: []string{"/checkout"}})
	if err != nil {
		return err
	}
	defer g.Close()
	srv := &http.Server{Addr: addr, Handler: newShop(g, room, event, nil), ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("shop serving", "addr", addr, "checkout", "http://"+addr+"/checkout", "waiting_room", g.WaitingRoomURL())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newShop is the shop's handler, the whole site behind the gate's Site (which lets through only
// what is not under its Paths): a public home page; /checkout; and POST /checkout/done, the end
// of a purchase, which ends the visitor's admitted session at the
// waiting room (DELETE of the ticket, so the slot goes to the next in line at once) and
// clears the admission cookie. seen, when set, is told of every admitted request and of every
// session ended (tests count the shop's admitted visitors with it).
func newShop(g *gate.Gate, room, event string, seen func(a gate.Admission, done bool)) http.Handler {
	if seen == nil {
		seen = func(gate.Admission, bool) {}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Shop</title><h1>Shop</h1><p><a href="/checkout">Buy a ticket</a></p>`)
	})
	mux.HandleFunc("GET /checkout", func(w http.ResponseWriter, r *http.Request) {
		a, _ := gate.FromContext(r.Context()) // always there behind the gate
		seen(a, false)
		if !strings.Contains(r.Header.Get("Accept"), "text/html") {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"event": a.Event, "ticket": a.TicketID, "number": a.Number})
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = checkoutPage.Execute(w, a)
	})
	mux.HandleFunc("POST /checkout/done", func(w http.ResponseWriter, r *http.Request) {
		a, _ := gate.FromContext(r.Context())
		seen(a, true)
		req, err := http.NewRequestWithContext(r.Context(), http.MethodDelete,
			strings.TrimSuffix(room, "/")+"/v1/events/"+url.PathEscape(event)+"/tickets/"+url.PathEscape(a.TicketID), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, "the waiting room did not answer", http.StatusBadGateway)
			return
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotFound {
			http.Error(w, "the waiting room refused to end the session: "+resp.Status, http.StatusBadGateway)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: g.CookieName(), Value: "", Path: "/", MaxAge: -1, HttpOnly: true})
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "thank you, ticket %d\n", a.Number)
	})
	return g.Site(mux)
}
