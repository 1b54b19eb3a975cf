package apidoc_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/syncbuf"
)

// binDir holds the binary buildOnce built; TestMain removes it.
var binDir string

// buildOnce builds the waitroom binary once per test process.
var buildOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "waitroom-apidoc-")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "waitroom")
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	cmd := exec.Command(goTool, "build", "-o", bin, "./cmd/waitroom")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// freeAddr returns a loopback address with a port nobody listens on right now.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// serve starts `waitroom serve` with args and env (added to the test's environment) and
// returns its base URL once /readyz answers 200. At cleanup it stops the process with SIGTERM
// (a graceful stop), and logs its output if the test failed.
func serve(t *testing.T, env []string, args ...string) string {
	t.Helper()
	bin, err := buildOnce()
	require.NoError(t, err)
	addr := freeAddr(t)
	cmd := exec.Command(bin, append([]string{"serve", "--addr", addr}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("waitroom serve exited with %v", err)
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("waitroom serve did not stop within 20 s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("waitroom serve output:\n%s", out.String())
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("waitroom serve exited before it was ready: %v\n%s", err, out.String())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			t.Fatalf("waitroom serve not ready within 30 s\n%s", out.String())
		}
	}
}

func getenv(k string) string { return os.Getenv(k) }
