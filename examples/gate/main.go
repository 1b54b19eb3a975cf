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
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
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
<p>You are in: ticket #{{.Number}} of {{.Event}}, admitted until {{.Expires.Format "15:04:05 MST"}}.</p>
`))

func run(addr, room, event string, online bool, log *slog.Logger) error {
	g, err := gate.New(gate.Config{WaitingRoomURL: room, EventID: event, OnlineCheck: online, Logger: log})
	if err != nil {
		return err
	}
	defer g.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Shop</title><h1>Shop</h1><p><a href="/checkout">Buy a ticket</a></p>`)
	})
	mux.Handle("GET /checkout", g.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := gate.FromContext(r.Context()) // always there behind the gate
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = checkoutPage.Execute(w, a)
	})))

	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
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
