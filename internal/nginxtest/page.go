package nginxtest

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// PageThrough checks that the waiting page works through the nginx at front ("http://host:port",
// a port other than 80) for event ev, as a browser uses it: its join names the page's origin
// (front) in Origin, as browsers do on a POST, and so do its WebSocket handshake and its
// server-sent events. Waitroom allows them by comparing the Origin's host:port with Host, so
// this fails when nginx passes on a Host without the port the visitor wrote.
func PageThrough(t testing.TB, front, ev string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, front+"/v1/events/"+ev+"/tickets", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", front)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the page's join through nginx: %v", err)
	}
	var tk struct {
		TicketID string `json:"ticket_id"`
		Code     string `json:"code"`
	}
	err = json.NewDecoder(resp.Body).Decode(&tk)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || err != nil || tk.TicketID == "" {
		t.Fatalf("the page's join through nginx, Origin %s: %d %s (%v)", front, resp.StatusCode, tk.Code, err)
	}
	ticket := "/v1/events/" + ev + "/tickets/" + tk.TicketID

	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(front, "http")+ticket+"/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Origin": {front}}})
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		t.Fatalf("the page's WebSocket through nginx, Origin %s: %d %v", front, code, err)
	}
	if _, _, err := c.Read(ctx); err != nil { // the first update: the place in line
		t.Fatalf("the page's WebSocket through nginx: %v", err)
	}
	c.Close(websocket.StatusNormalClosure, "")

	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, front+ticket+"/events", nil)
	req.Header.Set("Origin", front)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the page's event stream through nginx: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("the page's event stream through nginx, Origin %s: %d %s", front, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
