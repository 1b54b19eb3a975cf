package cli

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/waitroom/waitroom/internal/draw"
)

// TestVerifyDrawCommand: `waitroom verify-draw` is registered and keeps draw.Command's exit
// codes (0 verified, 1 mismatch, 2 usage). The command itself is tested in package draw.
func TestVerifyDrawCommand(t *testing.T) {
	seed := make([]byte, draw.SeedLen)
	for i := range seed {
		seed[i] = byte(i)
	}
	seedHex, c := hex.EncodeToString(seed), draw.Commitment(seed)
	var out, errb bytes.Buffer
	if code := Main([]string{"verify-draw", "--seed", seedHex, "--commitment", c, "--n", "10"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	// The worked example of docs/draw.md.
	if got, want := strings.Fields(out.String()), strings.Fields("1 7 2 9 3 3 4 6 5 10 6 8 7 1 8 5 9 4 10 2"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("places %q, want %q", got, want)
	}
	out.Reset()
	if code := Main([]string{"verify-draw", "--seed", seedHex, "--commitment", draw.Commitment(make([]byte, 32)), "--n", "10"}, &out, &errb); code != 1 {
		t.Fatalf("commitment mismatch: exit %d, want 1", code)
	}
	if code := Main([]string{"verify-draw", "--n", "10"}, &out, &errb); code != 2 {
		t.Fatalf("missing flags: exit %d, want 2", code)
	}
	out.Reset()
	if code := Main([]string{"help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "verify-draw") {
		t.Fatalf("help: exit %d, %q", code, out.String())
	}
}
