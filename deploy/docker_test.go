package deploy_test

import (
	"bytes"
	"cmp"
	"debug/elf"
	"go/version"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"
)

const dockerfilePath = "docker/Dockerfile"

// dockerfile is deploy/docker/Dockerfile parsed by BuildKit's own front end.
type dockerfile struct {
	stages   []instructions.Stage
	metaArgs map[string]string // ARGs before the first FROM, with their defaults
}

func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	src, err := os.ReadFile(dockerfilePath)
	require.NoError(t, err)
	res, err := parser.Parse(bytes.NewReader(src))
	require.NoError(t, err)
	for _, w := range res.Warnings {
		t.Errorf("Dockerfile parser: %s", w.Short)
	}
	// BuildKit's build checks (the ones `docker build --check` runs), each a failure here.
	lint := linter.New(&linter.Config{Warn: func(rule, description, url, msg string, loc []parser.Range) {
		t.Errorf("Dockerfile check %s: %s (%s)", rule, msg, url)
	}})
	stages, metaArgs, err := instructions.Parse(res.AST, lint)
	require.NoError(t, err)
	d := dockerfile{stages: stages, metaArgs: map[string]string{}}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			require.NotNil(t, kv.Value, "ARG %s before FROM needs a default", kv.Key)
			d.metaArgs[kv.Key] = *kv.Value
		}
	}
	return d
}

// expand replaces ${NAME} and $NAME with vars (as the FROM line's ARG expansion does).
func expand(s string, vars map[string]string) string {
	return os.Expand(s, func(k string) string { return vars[k] })
}

// buildRun returns the build stage's RUN that runs `go build`, its command line, and the
// environment it runs with: the stage's ARGs (their defaults) and ENVs before it.
func buildRun(t *testing.T, d dockerfile) (*instructions.RunCommand, string, map[string]string) {
	t.Helper()
	env := map[string]string{}
	var runs []*instructions.RunCommand
	for _, c := range d.stages[0].Commands {
		switch c := c.(type) {
		case *instructions.ArgCommand:
			for _, kv := range c.Args {
				require.NotNil(t, kv.Value, "ARG %s needs a default", kv.Key)
				env[kv.Key] = *kv.Value
			}
		case *instructions.EnvCommand:
			if len(runs) == 0 {
				for _, kv := range c.Env {
					env[kv.Key] = kv.Value
				}
			}
		case *instructions.RunCommand:
			if strings.Contains(strings.Join(c.CmdLine, " "), "go build") {
				require.True(t, c.PrependShell, "the go build RUN is in shell form (it expands the ARGs)")
				runs = append(runs, c)
			}
		}
	}
	require.Len(t, runs, 1, "one RUN with go build in the first stage")
	return runs[0], strings.Join(runs[0].CmdLine, " "), env
}

// goCaches are the module cache and the build cache of the official golang image: GOPATH is
// /go there, and the build runs as root (no USER in the stage), so GOCACHE is root's.
func goCaches(t *testing.T, build instructions.Stage, env map[string]string) (modCache, buildCache string) {
	t.Helper()
	for _, c := range build.Commands {
		if u, ok := c.(*instructions.UserCommand); ok {
			t.Fatalf("USER %s in the build stage: the cache mounts assume root's GOCACHE", u.User)
		}
	}
	modCache = env["GOMODCACHE"]
	if modCache == "" {
		modCache = path.Join(cmp.Or(env["GOPATH"], "/go"), "pkg", "mod")
	}
	return modCache, cmp.Or(env["GOCACHE"], "/root/.cache/go-build")
}

func TestDockerfile(t *testing.T) {
	d := parseDockerfile(t)
	require.GreaterOrEqual(t, len(d.stages), 2, "multi-stage: build, then a minimal runtime")
	build, final := d.stages[0], d.stages[len(d.stages)-1]
	require.Equal(t, "build", build.Name)

	// The build stage's Go is the service module's: at least its go line, and at least the
	// patch its toolchain line pins (the image sets GOTOOLCHAIN=local: it never fetches another).
	goModSrc, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	require.NoError(t, err)
	goMod, err := modfile.Parse("go.mod", goModSrc, nil) // strict: ParseLax drops the toolchain line
	require.NoError(t, err)
	require.NotNil(t, goMod.Toolchain, "go.mod pins the patch release with a toolchain line")
	base := expand(build.BaseName, d.metaArgs)
	m := regexp.MustCompile(`^golang:(\d+\.\d+(?:\.\d+)?)`).FindStringSubmatch(base)
	require.NotNil(t, m, "build stage on the official golang image: %s", base)
	require.GreaterOrEqual(t, version.Compare("go"+m[1], "go"+goMod.Go.Version), 0,
		"the image's Go %s is older than go.mod's %s", m[1], goMod.Go.Version)
	require.GreaterOrEqual(t, version.Compare("go"+m[1], goMod.Toolchain.Name), 0,
		"the image's Go %s is older than go.mod's toolchain %s", m[1], goMod.Toolchain.Name)

	runCmd, run, buildEnv := buildRun(t, d)
	require.Contains(t, run, "CGO_ENABLED=0 ", "a static binary: the SQLite driver is pure Go")
	require.Regexp(t, `-o /out/waitroom\b`, run)
	require.Contains(t, run, "./cmd/waitroom")
	// The service module alone, whatever go.work the context might hold.
	require.Equal(t, "off", buildEnv["GOWORK"], "ENV GOWORK=off in the build stage, before the go build")

	// Every go command of the build stage keeps the module downloads in a cache mount (no
	// `go mod download` of everything into a layer); the go build keeps its build cache too.
	modCache, buildCache := goCaches(t, build, buildEnv)
	for _, c := range build.Commands {
		r, ok := c.(*instructions.RunCommand)
		if !ok || !regexp.MustCompile(`(^|[\s;&|])go\s`).MatchString(strings.Join(r.CmdLine, " ")) {
			continue
		}
		// The mounts' values are read when BuildKit expands the RUN with the stage's variables.
		require.NoError(t, r.Expand(func(w string) (string, error) { return expand(w, buildEnv), nil }))
		caches := map[string]bool{}
		for _, mnt := range instructions.GetMounts(r) {
			if mnt.Type == instructions.MountTypeCache {
				caches[mnt.Target] = true
			}
		}
		require.True(t, caches[modCache], "RUN %s: no cache mount on the module cache %s", r.CmdLine, modCache)
		require.NotContains(t, strings.Join(r.CmdLine, " "), "go mod download",
			"modules are downloaded by go build into the cache mount, not into a layer")
		if r == runCmd {
			require.True(t, caches[buildCache], "the go build has no cache mount on the build cache %s", buildCache)
		}
	}

	// The runtime stage: minimal base, non-root, exec-form entrypoint (no shell there).
	finalBase := expand(final.BaseName, d.metaArgs)
	require.True(t, strings.HasPrefix(finalBase, "gcr.io/distroless/static") || finalBase == "scratch",
		"final stage on distroless/static or scratch, not %s", finalBase)
	var user, workdir string
	var exposed []string
	env := map[string]string{}
	var entrypoint *instructions.EntrypointCommand
	for _, c := range final.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.ExposeCommand:
			exposed = append(exposed, c.Ports...)
		case *instructions.EnvCommand:
			for _, kv := range c.Env {
				env[kv.Key] = kv.Value
			}
		case *instructions.WorkdirCommand:
			workdir = c.Path
		case *instructions.EntrypointCommand:
			entrypoint = c
		case *instructions.CopyCommand:
			if c.From != "" {
				require.Equal(t, build.Name, c.From, "COPY --from a stage of this file")
			}
		case *instructions.HealthCheckCommand:
			t.Errorf("HEALTHCHECK in the final stage: it has no shell or HTTP client to probe with")
		case *instructions.RunCommand:
			t.Errorf("RUN in the final stage: distroless has no shell")
		}
	}
	require.NotEmpty(t, user, "USER set in the final stage")
	uid := strings.SplitN(user, ":", 2)[0]
	require.NotContains(t, []string{"root", "0"}, uid)
	require.Regexp(t, `^[1-9][0-9]*$`, uid, "a numeric uid, so that runAsNonRoot can verify it")
	require.Equal(t, []string{"8080"}, exposed)
	require.Equal(t, ":8080", env["WAITROOM_ADDR"], "listens on the EXPOSEd port")
	require.Equal(t, "/data", workdir)
	require.Equal(t, "/data/waitroom.db", env["WAITROOM_DATA"])
	for name := range env {
		require.Contains(t, waitroomEnv(t), name, "ENV %s is not read by waitroom", name)
	}
	require.NotNil(t, entrypoint)
	require.False(t, entrypoint.PrependShell, "exec-form ENTRYPOINT: there is no /bin/sh")
	require.Equal(t, []string{"/usr/local/bin/waitroom"}, entrypoint.CmdLine)
}

// TestDockerfileBuild runs the Dockerfile's go build line, with its ARGs set as a release
// build would, in a copy of the build context filtered by .dockerignore, and checks the binary
// is static and carries the version.
func TestDockerfileBuild(t *testing.T) {
	bin := dockerBinary(t)
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "a static binary has no ELF interpreter")
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	require.Empty(t, libs, "a static binary needs no shared library")

	out, err := exec.Command(bin, "--version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "waitroom "+releaseVersion+" (commit "+releaseRevision+"; built "+releaseDate+"; ", string(out[:strings.LastIndex(string(out), "; ")+2]))
}

// The build arguments TestDockerfileBuild passes, as `docker build --build-arg` would.
const (
	releaseVersion  = "v9.8.7-test"
	releaseRevision = "0123456789abcdef0123456789abcdef01234567"
	releaseDate     = "2026-12-01T09:00:00Z"
)

var (
	dockerBinOnce sync.Once
	dockerBinPath string
	dockerBinErr  error
	dockerBinLog  string
)

// dockerBinary builds waitroom once per test binary as the Dockerfile's build stage does and
// returns its path; later callers share it (the Grafana check runs it).
func dockerBinary(t *testing.T) string {
	t.Helper()
	d := parseDockerfile(t)
	_, run, env := buildRun(t, d)
	dockerBinOnce.Do(func() {
		dockerBinPath, dockerBinLog, dockerBinErr = buildAsDockerfile(run, env)
	})
	require.NoError(t, dockerBinErr, "%s", dockerBinLog)
	return dockerBinPath
}

// buildAsDockerfile runs the go build line in a copy of the build context, with env (the
// stage's ARGs and ENVs) and the release build arguments. The cache mounts are the host's
// module and build caches here: what they hold does not change what is built.
func buildAsDockerfile(run string, env map[string]string) (bin, log string, err error) {
	dir, err := os.MkdirTemp("", "waitroom-docker-build-")
	if err != nil {
		return "", "", err
	}
	// Removed at the end of the test binary (TestMain): the binary is shared by the tests.
	tempDirs = append(tempDirs, dir)
	src, out := filepath.Join(dir, "src"), filepath.Join(dir, "out")
	if err := copyContext(repoRoot, src); err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", "", err
	}
	// The one change: /out (the stage's scratch directory) becomes a temporary one.
	cmdline := strings.ReplaceAll(run, "/out/", out+"/")
	cmd := exec.Command("/bin/sh", "-c", cmdline)
	cmd.Dir = src
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "VERSION="+releaseVersion, "REVISION="+releaseRevision, "BUILD_DATE="+releaseDate)
	b, err := cmd.CombinedOutput()
	return filepath.Join(out, "waitroom"), cmdline + "\n" + string(b), err
}

// copyContext copies the files of the repository that .dockerignore lets into the build
// context, as the docker client does before it sends the context.
func copyContext(root, dst string) error {
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		return err
	}
	patterns, err := ignorefile.ReadAll(f)
	f.Close()
	if err != nil {
		return err
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return err
	}
	return filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		skip, err := pm.MatchesOrParentMatches(filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		if skip {
			if e.IsDir() && !pm.Exclusions() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		if e.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !e.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		o, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(o, in); err != nil {
			o.Close()
			return err
		}
		return o.Close()
	})
}

func TestDockerignore(t *testing.T) {
	dst := t.TempDir()
	require.NoError(t, copyContext(repoRoot, dst))
	for _, in := range []string{"go.mod", "go.sum", "cmd/waitroom/main.go", "internal/web/web.go"} {
		require.FileExists(t, filepath.Join(dst, in), "in the build context")
	}
	for _, out := range []string{".git", "go.work", "go.work.sum", "deploy", "docs", "internal/cli/cli_test.go"} {
		require.NoFileExists(t, filepath.Join(dst, out), "left out of the build context")
		require.NoDirExists(t, filepath.Join(dst, out), "left out of the build context")
	}
}
