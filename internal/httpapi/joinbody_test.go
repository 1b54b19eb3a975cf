package httpapi

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/httpjson"
)

// joinBodies are join bodies of every kind: the plain shapes decodePlain takes, and the ones it
// must leave to httpjson.DecodeJSON (valid or refused).
var joinBodies = []string{
	// plain
	`{}`, ` { } `, `{"challenge":"v1.e.0123.8.1700000000.AbC-_","solution":"x9"}`,
	`{"solution":"s","challenge":"c"}`, "\t{\r\n\"captcha_token\" : \"tok en~!\" }\n",
	`{"challenge":"","solution":""}`, `{"challenge":"a","solution":"b","captcha_token":"c"}`,
	// left to DecodeJSON
	``, `null`, `[]`, `"x"`, `{`, `}`, `{"challenge":"a"`, `{"challenge":"a",}`, `{,}`,
	`{"challenge":"a" "solution":"b"}`, `{"challenge":"a"}x`, `{"challenge":"a"}{}`,
	`{"challenge":"a","challenge":"b"}`, `{"Challenge":"a"}`, `{"challenge ":"a"}`,
	`{"challenge":"\u0041"}`, `{"challenge":"a\"b"}`, `{"challenge":"\n"}`, "{\"challenge\":\"\x7f\"}",
	"{\"challenge\":\"é\"}", "{\"challenge\":\"\xff\"}", `{"challenge":1}`, `{"challenge":null}`,
	`{"user_id":"u"}`, `{"identity":"j.w.t"}`, `{"user_id":""}`, `{"other":"x"}`, `{"challenge":true}`,
	"\v{}", `{"challenge":"a"}` + "\u00a0",
}

// TestJoinBodyPlain: decodePlain takes the plain bodies, and for every body it takes, the result
// is DecodeJSON's; the others it leaves untouched to DecodeJSON.
func TestJoinBodyPlain(t *testing.T) {
	plain := 0
	for _, body := range joinBodies {
		checkJoinBody(t, []byte(body))
		var b joinBody
		if b.decodePlain([]byte(body)) {
			plain++
		}
	}
	require.Equal(t, 7, plain, "the plain bodies of the table are taken without DecodeJSON")
}

// FuzzJoinBody: whatever the body, decodePlain agrees with DecodeJSON when it decodes it.
func FuzzJoinBody(f *testing.F) {
	for _, body := range joinBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(checkJoinBody)
}

func checkJoinBody(t *testing.T, body []byte) {
	var fast, slow joinBody
	if !fast.decodePlain(body) {
		require.Equal(t, joinBody{}, fast, "%q: left untouched", body)
		return
	}
	require.True(t, httpjson.DecodeJSON(httptest.NewRecorder(), body, &slow), "%q: DecodeJSON refuses what decodePlain took", body)
	require.Equal(t, slow, fast, "%q", body)
}

// BenchmarkJoinBody: a guarded join's body (a solved proof of work) decoded the plain way and
// by DecodeJSON.
func BenchmarkJoinBody(b *testing.B) {
	body := []byte(`{"challenge":"v1.guarded.0f3c9a1e5b7d2c4f6a8e0b1d3f5c7a9e.8.1765080000.q0W3eR5tY7uI9oP1aS3dFg","solution":"Zx81"}`)
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var jb joinBody
			if !jb.decodePlain(body) {
				b.Fatal("not plain")
			}
		}
	})
	b.Run("DecodeJSON", func(b *testing.B) {
		b.ReportAllocs()
		w := httptest.NewRecorder()
		for b.Loop() {
			var jb joinBody
			if !httpjson.DecodeJSON(w, body, &jb) {
				b.Fatal("refused")
			}
		}
	})
}
