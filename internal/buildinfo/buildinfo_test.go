package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func stamped(mainVersion string, settings ...string) func() (*debug.BuildInfo, bool) {
	return func() (*debug.BuildInfo, bool) {
		bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/waitroom/waitroom", Version: mainVersion}}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi, true
	}
}

// setX sets the -X variables for one test, as a release build's linker would.
func setX(t *testing.T, v, r, d string) {
	old := [3]string{version, revision, date}
	version, revision, date = v, r, d
	t.Cleanup(func() { version, revision, date = old[0], old[1], old[2] })
}

func TestRead(t *testing.T) {
	tests := []struct {
		name       string
		x          [3]string // version, revision, date given with -X
		build      func() (*debug.BuildInfo, bool)
		want       Info
		wantString string
	}{
		{
			name:       "no build info at all",
			build:      func() (*debug.BuildInfo, bool) { return nil, false },
			want:       Info{Version: "devel", Revision: Unknown, Date: Unknown},
			wantString: "waitroom devel (commit unknown; built unknown; ",
		},
		{
			name:  "source build without VCS stamp",
			build: stamped("(devel)"),
			want:  Info{Version: "devel", Revision: Unknown, Date: Unknown, GoVersion: "go1.99.1"},
		},
		{
			name:  "Git checkout with local changes",
			build: stamped("v0.0.0-20261201090000-1f2e3d4c5b6a+dirty", "vcs", "git", "vcs.revision", "1f2e3d4c5b6a", "vcs.time", "2026-12-01T09:00:00Z", "vcs.modified", "true"),
			want: Info{Version: "v0.0.0-20261201090000-1f2e3d4c5b6a+dirty", Revision: "1f2e3d4c5b6a", Date: "2026-12-01T09:00:00Z",
				Modified: true, GoVersion: "go1.99.1"},
			wantString: "waitroom v0.0.0-20261201090000-1f2e3d4c5b6a+dirty (commit 1f2e3d4c5b6a, modified; built 2026-12-01T09:00:00Z; go1.99.1)",
		},
		{
			name:       "release build: -X wins over the VCS stamp",
			x:          [3]string{"v1.2.3", "abcdef", "2026-12-24T00:00:00Z"},
			build:      stamped("(devel)", "vcs.revision", "1f2e3d4c5b6a", "vcs.time", "2026-12-01T09:00:00Z", "vcs.modified", "true"),
			want:       Info{Version: "v1.2.3", Revision: "abcdef", Date: "2026-12-24T00:00:00Z", GoVersion: "go1.99.1"},
			wantString: "waitroom v1.2.3 (commit abcdef; built 2026-12-24T00:00:00Z; go1.99.1)",
		},
		{
			name:  "only the version given with -X",
			x:     [3]string{"v2.0.0", "", ""},
			build: stamped("(devel)", "vcs.revision", "1f2e3d4c5b6a", "vcs.time", "2026-12-01T09:00:00Z"),
			want:  Info{Version: "v2.0.0", Revision: "1f2e3d4c5b6a", Date: "2026-12-01T09:00:00Z", GoVersion: "go1.99.1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setX(t, tt.x[0], tt.x[1], tt.x[2])
			got := read(tt.build)
			if tt.want.GoVersion == "" {
				require.True(t, strings.HasPrefix(got.GoVersion, "go"), got.GoVersion)
				tt.want.GoVersion = got.GoVersion
			}
			require.Equal(t, tt.want, got)
			if tt.wantString != "" {
				require.True(t, strings.HasPrefix(got.String(), tt.wantString), "%q does not start with %q", got.String(), tt.wantString)
			}
		})
	}
}

func TestCollector(t *testing.T) {
	// Two registries each take their own collector.
	for range 2 {
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(Collector()))
		mfs, err := reg.Gather()
		require.NoError(t, err)
		require.Len(t, mfs, 1)
		require.Equal(t, "waitroom_build_info", mfs[0].GetName())
		require.Len(t, mfs[0].GetMetric(), 1)
		m := mfs[0].GetMetric()[0]
		require.Equal(t, 1.0, m.GetGauge().GetValue())
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		i := Get()
		require.Equal(t, map[string]string{"version": i.Version, "revision": i.Revision, "goversion": i.GoVersion}, labels)
	}
}
