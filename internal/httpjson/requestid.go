package httpjson

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"sync/atomic"
)

// Every answer of every listener carries X-Request-Id (the API's, and the gate's own answers):
// RequestID is the one rule of what it is.

// RequestID is the request's X-Request-Id when it is 1-128 printable ASCII characters (a proxy
// in front set it), else a new random one; the response carries it back and the access log
// names it, so one request can be followed through proxies and logs.
func RequestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 128 {
		ok := true
		for i := 0; i < len(id) && ok; i++ {
			ok = id[i] > 0x20 && id[i] < 0x7f
		}
		if ok {
			return id
		}
	}
	var n [8]byte
	var b [16]byte
	binary.BigEndian.PutUint64(n[:], requestIDs.Add(1))
	hex.Encode(b[:], n[:])
	return string(b[:])
}

// requestIDs numbers the requests that come without an X-Request-Id, from a random start: ids
// that do not repeat within an instance and hardly across instances, without the getrandom
// call per request that crypto/rand costs (they are names, not secrets).
var requestIDs = func() *atomic.Uint64 {
	var n atomic.Uint64
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails (Go 1.24+)
	n.Store(binary.BigEndian.Uint64(b[:]))
	return &n
}()
