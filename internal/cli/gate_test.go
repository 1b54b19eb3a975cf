package cli

import (
	"bytes"
	"net"
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

// TestServeGateListenOfItsOwn: a gate whose listen takes --addr's or --metrics-addr's port, or
// is not host:port, is a usage error (exit 2) naming both, not a bind error of the second
// listener pointing at some other process.
func TestServeGateListenOfItsOwn(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String() // free again once closed: serve takes it
	_, port, _ := net.SplitHostPort(addr)
	l.Close()
	dir := t.TempDir()
	data := filepath.Join(dir, "waitroom.db")
	for _, tc := range []struct {
		listen string
		args   []string
		want   string
	}{
		{addr, []string{"--addr", addr}, "listen " + addr + " takes --addr's port (" + addr + "): the gate needs a port of its own"},
		{":" + port, []string{"--addr", addr}, "takes --addr's port"},
		{"127.0.0.1:" + port, []string{"--addr", "127.0.0.1:0", "--metrics-addr", ":" + port}, "takes --metrics-addr's port"},
		{port, []string{"--addr", "127.0.0.1:0"}, `listen: must be host:port or :port: write ":` + port + `"`},
	} {
		gate := filepath.Join(dir, "gate.yaml")
		if err := os.WriteFile(gate, []byte("listen: \""+tc.listen+"\"\nsites:\n  - origin: http://127.0.0.1:3000\n    protect:\n      - event: sale\n        paths: [/checkout]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code := Main(append([]string{"serve", "--data", data, "--gate", gate}, tc.args...), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), tc.want) || strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("listen %s, %q: exit %d, stderr %q, want %q", tc.listen, tc.args, code, errb.String(), tc.want)
		}
	}
}
