// Package buildinfo tells which build of waitroom is running: its version, VCS commit and
// build date. They come from the binary's own build information (runtime/debug.ReadBuildInfo:
// the main module's version and the vcs.revision, vcs.time and vcs.modified settings that
// `go build` stamps inside a Git checkout), and a release build overrides them at link time:
//
//	go build -ldflags "-X github.com/waitroom/waitroom/internal/buildinfo.version=v1.2.3 \
//	    -X github.com/waitroom/waitroom/internal/buildinfo.revision=$(git rev-parse HEAD) \
//	    -X github.com/waitroom/waitroom/internal/buildinfo.date=$(date -u +%Y-%m-%dT%H:%M:%SZ)" ./cmd/waitroom
//
// deploy/docker/Dockerfile does exactly that from its VERSION, REVISION and BUILD_DATE args.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Set with -ldflags "-X" by release builds; empty otherwise. Each wins over what
// runtime/debug reports.
var (
	version  string
	revision string
	date     string
)

// Unknown is the value of a field nobody recorded (no -X, no VCS stamp).
const Unknown = "unknown"

// Info describes one build of the binary.
type Info struct {
	// Version is the -X version, else the main module's version as the go command stamped
	// it (a pseudo-version in a tagged checkout), else "devel".
	Version string `json:"version"`
	// Revision is the -X revision, else vcs.revision (the full commit hash), else "unknown".
	Revision string `json:"revision"`
	// Date is the -X build date, else vcs.time (the commit's time, RFC 3339, UTC), else
	// "unknown".
	Date string `json:"date"`
	// Modified is vcs.modified: built from a tree with uncommitted changes. Always false for
	// a -X revision.
	Modified bool `json:"modified"`
	// GoVersion is the Go toolchain that built the binary, e.g. "go1.26.8".
	GoVersion string `json:"go_version"`
}

var (
	once   sync.Once
	cached Info
)

// Get returns the build's information; it is read once per process.
func Get() Info {
	once.Do(func() { cached = read(debug.ReadBuildInfo) })
	return cached
}

// read assembles Info from the -X variables and what readBuild reports (a seam for tests).
func read(readBuild func() (*debug.BuildInfo, bool)) Info {
	i := Info{Version: "devel", Revision: Unknown, Date: Unknown, GoVersion: runtime.Version()}
	if bi, ok := readBuild(); ok && bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			i.Version = v
		}
		if bi.GoVersion != "" {
			i.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Revision = s.Value
			case "vcs.time":
				i.Date = s.Value
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		i.Version = version
	}
	if revision != "" {
		i.Revision, i.Modified = revision, false
	}
	if date != "" {
		i.Date = date
	}
	return i
}

// String is the line `waitroom --version` prints, e.g.
// "waitroom v1.2.3 (commit 1f2e3d…, modified; built 2026-12-01T09:00:00Z; go1.26.8)".
func (i Info) String() string {
	commit := i.Revision
	if i.Modified {
		commit += ", modified"
	}
	return fmt.Sprintf("waitroom %s (commit %s; built %s; %s)", i.Version, commit, i.Date, i.GoVersion)
}

// Collector returns a new collector of the constant gauge
// waitroom_build_info{version,revision,goversion} = 1, for joining the build onto other series
// in PromQL (e.g. `... * on(instance) group_left(version) waitroom_build_info`). Each call
// returns a fresh collector, so every registry can have its own.
func Collector() prometheus.Collector {
	i := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "waitroom_build_info",
		Help: "Always 1; the labels name the running build: version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{
			"version": i.Version, "revision": i.Revision, "goversion": i.GoVersion,
		},
	})
	g.Set(1)
	return g
}
