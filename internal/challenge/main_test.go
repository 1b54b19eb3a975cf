package challenge

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testIssuer is an Issuer with a fixed key and the default TTL.
func testIssuer(tb testing.TB) *Issuer {
	tb.Helper()
	is, err := NewIssuer(Config{Key: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		tb.Fatal(err)
	}
	return is
}
