package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeGateFileErrors: a bad gate file stops serve before it listens or opens anything,
// with exit code 2 and the file's line.
func TestServeGateFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "gate.yaml")
	if err := os.WriteFile(bad, []byte("sites:\n  - origin: http://127.0.0.1:3000\n    protect:\n      - event: Spring Sale\n        paths: [/checkout]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	data := filepath.Join(dir, "waitroom.db")
	code := Main([]string{"serve", "--addr", "127.0.0.1:0", "--data", data, "--gate", bad}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "gate.yaml: line 4: sites[0].protect[0].event") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	code = Main([]string{"serve", "--addr", "127.0.0.1:0", "--data", data, "--gate", filepath.Join(dir, "missing.yaml")}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "missing.yaml") {
		t.Fatalf("missing file: exit %d, stderr %q", code, errb.String())
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("the data file was created: %v", err)
	}
}
