package wsframe

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gobwas/ws"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCheckHandshake: the opening handshake's checks, in order, with the header each 426
// carries.
func TestCheckHandshake(t *testing.T) {
	t.Parallel()
	valid := func(change func(r *http.Request)) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "http://example.com/ws", nil)
		r.Header.Set("Upgrade", "websocket")
		r.Header.Set("Connection", "keep-alive, Upgrade")
		r.Header.Set("Sec-WebSocket-Version", "13")
		r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		if change != nil {
			change(r)
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		req    *http.Request
		fault  Fault  // 0: accepted
		header string // a header the refusal sets, "name: value"
	}{
		{"valid", valid(nil), 0, ""},
		{"token lists over several lines", valid(func(r *http.Request) {
			r.Header.Set("Upgrade", "h2c, WebSocket")
			r.Header["Connection"] = []string{"keep-alive", "upgrade"}
		}), 0, ""},
		{"the same page's origin", valid(func(r *http.Request) { r.Header.Set("Origin", "https://example.com") }), 0, ""},
		{"plain GET", httptest.NewRequest(http.MethodGet, "http://example.com/ws", nil), NotHandshake, "Upgrade: websocket"},
		{"no Connection: upgrade", valid(func(r *http.Request) { r.Header.Set("Connection", "keep-alive") }), NotHandshake, "Upgrade: websocket"},
		{"POST", valid(func(r *http.Request) { r.Method = http.MethodPost }), NotGet, ""},
		{"HEAD", valid(func(r *http.Request) { r.Method = http.MethodHead }), NotGet, ""},
		{"HTTP/1.0", valid(func(r *http.Request) { r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.0", 1, 0 }), NotGet, ""},
		{"a body", valid(func(r *http.Request) { r.ContentLength = 5 }), NotGet, ""},
		{"a chunked body", valid(func(r *http.Request) { r.TransferEncoding = []string{"chunked"} }), NotGet, ""},
		{"version 8", valid(func(r *http.Request) { r.Header.Set("Sec-WebSocket-Version", "8") }), BadVersion, "Sec-WebSocket-Version: 13"},
		{"no version", valid(func(r *http.Request) { r.Header.Del("Sec-WebSocket-Version") }), BadVersion, "Sec-WebSocket-Version: 13"},
		{"key not 16 bytes", valid(func(r *http.Request) { r.Header.Set("Sec-WebSocket-Key", "c2hvcnQ=") }), BadKey, ""},
		{"key not base64", valid(func(r *http.Request) { r.Header.Set("Sec-WebSocket-Key", strings.Repeat("!", 24)) }), BadKey, ""},
		{"key twice", valid(func(r *http.Request) { r.Header.Add("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==") }), BadKey, ""},
		{"version twice", valid(func(r *http.Request) { r.Header.Add("Sec-WebSocket-Version", "8") }), BadVersion, "Sec-WebSocket-Version: 13"},
		{"version 13 twice", valid(func(r *http.Request) { r.Header.Add("Sec-WebSocket-Version", "13") }), BadVersion, "Sec-WebSocket-Version: 13"},
		{"another site's page", valid(func(r *http.Request) { r.Header.Set("Origin", "https://elsewhere.example") }), CrossOrigin, ""},
		{"an origin without a scheme", valid(func(r *http.Request) { r.Header.Set("Origin", "example.com") }), CrossOrigin, ""},
		{"two origins", valid(func(r *http.Request) {
			r.Header["Origin"] = []string{"https://example.com", "https://elsewhere.example"}
		}), CrossOrigin, ""},
	} {
		w := httptest.NewRecorder()
		err := CheckHandshake(w, tc.req)
		if tc.fault == 0 {
			require.NoError(t, err, tc.name)
			require.Empty(t, w.Header(), tc.name)
			continue
		}
		var herr *HandshakeError
		require.ErrorAs(t, err, &herr, tc.name)
		require.Equal(t, tc.fault, herr.Fault, tc.name)
		if tc.header == "" {
			require.Empty(t, w.Header(), tc.name)
		} else {
			name, value, _ := strings.Cut(tc.header, ": ")
			require.Equal(t, value, w.Header().Get(name), tc.name)
		}
		require.Equal(t, 0, w.Body.Len(), "%s: CheckHandshake writes no response", tc.name)
	}
}

func TestFaultStatus(t *testing.T) {
	t.Parallel()
	for f, status := range map[Fault]int{
		NotHandshake: http.StatusUpgradeRequired, NotGet: http.StatusBadRequest, BadVersion: http.StatusUpgradeRequired,
		BadKey: http.StatusBadRequest, CrossOrigin: http.StatusForbidden,
	} {
		require.Equal(t, status, f.Status(), f.String())
		require.NotEqual(t, "unknown handshake fault", f.String())
	}
}

// TestAppendFrames: frames as a client's parser reads them, at each payload length encoding.
func TestAppendFrames(t *testing.T) {
	t.Parallel()
	prefix := []byte("kept")
	for _, tc := range []struct{ n, header int }{{0, 2}, {1, 2}, {125, 2}, {126, 4}, {0xffff, 4}, {0x10000, 10}, {70_000, 10}} {
		payload := bytes.Repeat([]byte("x"), tc.n)
		b := AppendText(bytes.Clone(prefix), payload)
		require.Equal(t, prefix, b[:len(prefix)], "AppendText appends")
		require.Len(t, b, len(prefix)+tc.header+tc.n)
		f, err := ws.ReadFrame(bytes.NewReader(b[len(prefix):])) //nolint:staticcheck // a test of small frames
		require.NoError(t, err)
		require.Equal(t, ws.OpText, f.Header.OpCode)
		require.True(t, f.Header.Fin)
		require.False(t, f.Header.Masked)
		require.Equal(t, string(payload), string(f.Payload))
	}
	reason := strings.Repeat("r", MaxCloseReason)
	f, err := ws.ReadFrame(bytes.NewReader(AppendClose(nil, StatusRestart, reason))) //nolint:staticcheck // small
	require.NoError(t, err)
	require.Equal(t, ws.OpClose, f.Header.OpCode)
	code, got := ws.ParseCloseFrameData(f.Payload)
	require.Equal(t, ws.StatusCode(1012), code)
	require.Equal(t, reason, got)
}

// TestCloseReply: the code a client's close frame is answered with (RFC 6455 sections 5.5.1
// and 7.4).
func TestCloseReply(t *testing.T) {
	t.Parallel()
	body := func(code ws.StatusCode, reason string) []byte { return ws.NewCloseFrameBody(code, reason) }
	for _, tc := range []struct {
		name string
		p    []byte
		want StatusCode
	}{
		{"no payload", nil, StatusNormal},
		{"one byte", []byte{3}, StatusProtocolError},
		{"1000", body(1000, ""), 1000},
		{"1001 with a reason", body(1001, "tab closed"), 1001},
		{"an application code", body(4999, ""), 4999},
		{"below 1000", body(999, ""), StatusProtocolError},
		{"1005 (no status: never sent)", body(1005, ""), StatusProtocolError},
		{"1006 (abnormal: never sent)", body(1006, ""), StatusProtocolError},
		{"1015 (TLS: never sent)", body(1015, ""), StatusProtocolError},
		{"5000", body(5000, ""), StatusProtocolError},
		{"65535", body(65535, ""), StatusProtocolError},
		{"a reason that is not UTF-8", append(body(1000, ""), 0xff, 0xfe), StatusProtocolError},
	} {
		require.Equal(t, tc.want, closeReply(tc.p), tc.name)
	}
}

// TestLinger: after a protocol error the reader drops what the client still sends up to its
// close frame, and no further, within lingerBytes.
func TestLinger(t *testing.T) {
	t.Parallel()
	frame := func(f ws.Frame) []byte { return ws.MustCompileFrame(ws.MaskFrame(f)) }
	after := []byte("not read")
	var hdr [ws.MaxHeaderSize - 2]byte

	t.Run("stops after the client's close frame", func(t *testing.T) {
		var s []byte
		s = append(s, bytes.Repeat([]byte("u"), 10)...) // the rest of the offending frame
		s = append(s, frame(ws.NewTextFrame([]byte("more")))...)
		s = append(s, frame(ws.NewPingFrame([]byte("ping")))...)
		s = append(s, frame(ws.NewCloseFrame(ws.NewCloseFrameBody(1002, "")))...)
		s = append(s, after...)
		rd := bytes.NewReader(s)
		linger(rd, hdr[:], 10)
		require.Equal(t, len(after), rd.Len())
	})
	t.Run("a stream that does not parse is dropped up to the bound", func(t *testing.T) {
		rd := bytes.NewReader(make([]byte, 2*lingerBytes))
		linger(rd, hdr[:], -1)
		require.Equal(t, lingerBytes, rd.Len())
	})
	t.Run("an offending frame longer than the bound is dropped up to the bound", func(t *testing.T) {
		rd := bytes.NewReader(make([]byte, 2*lingerBytes))
		linger(rd, hdr[:], lingerBytes+1)
		require.Equal(t, lingerBytes, rd.Len())
	})
	t.Run("frames beyond the bound are not read", func(t *testing.T) {
		big := frame(ws.NewBinaryFrame(make([]byte, lingerBytes+1))) // a 14-byte header
		rd := bytes.NewReader(append(big, after...))
		linger(rd, hdr[:], 0)
		require.Equal(t, 1+len(after), rd.Len(), "the header, then lingerBytes")
	})
	t.Run("ends at the end of the stream", func(t *testing.T) {
		rd := bytes.NewReader(frame(ws.NewTextFrame([]byte("x"))))
		linger(rd, hdr[:], 0)
		require.Zero(t, rd.Len())
	})
}

// TestCheckHandshakeOrigin: an origin policy replaces the Host comparison (which DNS
// rebinding defeats: the attacker's name is then both Origin and Host).
func TestCheckHandshakeOrigin(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest(http.MethodGet, "http://rebound.example/ws", nil)
	r.Header.Set("Upgrade", "websocket")
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Sec-WebSocket-Version", "13")
	r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	r.Header.Set("Origin", "http://rebound.example")
	require.NoError(t, CheckHandshake(httptest.NewRecorder(), r), "same host passes the default check")
	only := func(r *http.Request) bool { return r.Header.Get("Origin") == "https://wait.example" }
	var herr *HandshakeError
	require.ErrorAs(t, CheckHandshakeOrigin(httptest.NewRecorder(), r, only), &herr)
	require.Equal(t, CrossOrigin, herr.Fault)
	r.Header.Set("Origin", "https://wait.example")
	require.NoError(t, CheckHandshakeOrigin(httptest.NewRecorder(), r, only))
}
