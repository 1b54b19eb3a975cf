package cli

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/buildinfo"
)

func TestVersion(t *testing.T) {
	want := buildinfo.Get().String() + "\n"
	for _, arg := range []string{"version", "--version", "-version"} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 0, Main([]string{arg}, &stdout, &stderr), arg)
		require.Equal(t, want, stdout.String(), arg)
		require.Empty(t, stderr.String(), arg)
	}
}
