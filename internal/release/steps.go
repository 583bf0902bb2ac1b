package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
)

// The steps of the rehearsal, in its order; each returns what it found.

// fromClone builds and runs the README's programs as the README says to
// before a release: each in a directory of the clone with a go.mod of its
// own, added to the clone's workspace by go work use . in that directory.
// It then puts the clone back as it was.
func (r *rehearsal) fromClone(ctx context.Context) (string, error) {
	readme, err := os.ReadFile(filepath.Join(r.clone, "README.md"))
	if err != nil {
		return "", err
	}
	if !bytes.Contains(readme, []byte("go work use .")) {
		return "", fmt.Errorf("README.md does not say how to use a clone (go work use .)")
	}
	progs, err := rehearsed(r.clone)
	if err != nil {
		return "", err
	}
	env := []string{"GOWORK="} // the clone's go.work, found from the program's directory
	var done []string
	for _, p := range progs {
		dir := filepath.Join(r.clone, "try-"+p.name)
		if err := os.Mkdir(dir, 0o777); err != nil {
			return "", err
		}
		if _, err := run(ctx, dir, env, "go", "mod", "init", "example.com/"+p.name); err != nil {
			return "", err
		}
		if _, err := run(ctx, dir, env, "go", "work", "use", "."); err != nil {
			return "", err
		}
		what, err := r.runProgram(ctx, p, dir, env)
		if err != nil {
			return "", err
		}
		done = append(done, what)
	}
	if _, err := git(ctx, r.clone, "checkout", "-q", "--", "go.work"); err != nil {
		return "", err
	}
	for _, p := range progs {
		if err := os.RemoveAll(filepath.Join(r.clone, "try-"+p.name)); err != nil {
			return "", err
		}
	}
	if status, err := git(ctx, r.clone, "status", "--porcelain"); err != nil || status != "" {
		return "", fmt.Errorf("the clone is not as it was: %v\n%s", err, indent(status))
	}
	return strings.Join(done, "\n"), nil
}

// runProgram writes p as main.go in dir, a module, builds it with env and
// runs it: the quickstart as a service, on a free loopback port in place
// of its localhost:8080, with the README's wrong logins; the others with
// REDIS_ADDR, checking that they print what their // Output: says.
func (r *rehearsal) runProgram(ctx context.Context, p program, dir string, env []string) (string, error) {
	if p.name == "quickstart" {
		if n := strings.Count(p.code, `"localhost:8080"`); n != 1 {
			return "", fmt.Errorf("%v: the quickstart listens on \"localhost:8080\" %d times; want once", p, n)
		}
		for try := 1; ; try++ {
			addr, err := freeAddr()
			if err != nil {
				return "", err
			}
			bin, err := buildProgram(ctx, p, strings.Replace(p.code, `"localhost:8080"`, `"`+addr+`"`, 1), dir, env)
			if err != nil {
				return "", err
			}
			what, err := r.checkQuickstart(ctx, p, bin, addr)
			if errors.Is(err, errExited) && try < 3 {
				continue // another process took the port, say: try another
			}
			return what, err
		}
	}
	bin, err := buildProgram(ctx, p, p.code, dir, env)
	if err != nil {
		return "", err
	}
	if err := r.flushRedis(); err != nil {
		return "", err
	}
	got, err := run(ctx, dir, []string{"REDIS_ADDR=" + r.redis}, bin)
	if err != nil {
		return "", fmt.Errorf("%v: %w", p, err)
	}
	if got != p.output {
		return "", fmt.Errorf("%v printed\n%s\nwant its // Output:\n%s", p, indent(got), indent(p.output))
	}
	return fmt.Sprintf("%s (%v): its // Output:, %d lines", p.name, p, strings.Count(got, "\n")), nil
}

// buildProgram writes code, p's, as main.go in dir, a module, and builds
// it with env; it returns the binary.
func buildProgram(ctx context.Context, p program, code, dir string, env []string) (string, error) {
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(code), 0o666); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, p.name)
	if _, err := run(ctx, dir, env, "go", "build", "-o", bin, "."); err != nil {
		return "", fmt.Errorf("%v does not build: %w", p, err)
	}
	return bin, nil
}

// flushRedis empties the rehearsal's Redis server, so that a program that
// runs twice starts from the same state.
func (r *rehearsal) flushRedis() error {
	c, err := net.DialTimeout("tcp", r.redis, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprint(c, "FLUSHALL\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "+OK\r\n" {
		return fmt.Errorf("redis-server on %s: FLUSHALL: got %q, %v", r.redis, line, err)
	}
	return nil
}

// checkQuickstart runs the quickstart's binary, listening on addr, and
// sends it the README's wrong logins: five are 401, the sixth 429 with a
// Retry-After of 60 seconds.
func (r *rehearsal) checkQuickstart(ctx context.Context, p program, bin, addr string) (string, error) {
	proc, err := startProc(ctx, exec.Command(bin))
	if err != nil {
		return "", err
	}
	defer proc.stop()
	if err := proc.waitListening(ctx, addr, func(net.Conn) bool { return true }); err != nil {
		return "", err
	}
	client := &http.Client{Timeout: 10 * time.Second}
	var codes []int
	var last http.Header
	for range 6 {
		resp, err := client.PostForm("http://"+addr+"/login", url.Values{"user": {"alice"}, "password": {"guess"}})
		if err != nil {
			return "", fmt.Errorf("%v: %w", p, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes, last = append(codes, resp.StatusCode), resp.Header
	}
	if want := []int{401, 401, 401, 401, 401, 429}; !slices.Equal(codes, want) || last.Get("Retry-After") != "60" {
		return "", fmt.Errorf("%v: six wrong passwords: got %v, the last with Retry-After %q; want %v, the last with Retry-After 60",
			p, codes, last.Get("Retry-After"), want)
	}
	return fmt.Sprintf("quickstart (%v): five wrong passwords 401, the sixth 429, Retry-After: 60, RateLimit: %s", p, last.Get("RateLimit")), nil
}

// refusals checks that release refuses a version that is not semantic, a
// version that CHANGELOG.md does not describe and a tree with an untracked
// file, before it changes anything.
func (r *rehearsal) refusals(ctx context.Context) (string, error) {
	_, errVersion := release(ctx, r.clone, "v0.1", io.Discard)
	if errVersion == nil || !strings.Contains(errVersion.Error(), "not a semantic version") {
		return "", fmt.Errorf("release v0.1: got %v, want a refusal", errVersion)
	}
	_, errChangelog := release(ctx, r.clone, "v0.0.1", io.Discard)
	if errChangelog == nil || !strings.Contains(errChangelog.Error(), "CHANGELOG.md has no section") {
		return "", fmt.Errorf("release v0.0.1: got %v, want a refusal", errChangelog)
	}
	stray := filepath.Join(r.clone, "stray.txt")
	if err := os.WriteFile(stray, nil, 0o666); err != nil {
		return "", err
	}
	_, errDirty := release(ctx, r.clone, r.version, io.Discard)
	if err := os.Remove(stray); err != nil {
		return "", err
	}
	if errDirty == nil || !strings.Contains(errDirty.Error(), "the tree has changes") {
		return "", fmt.Errorf("release %s with an untracked file: got %v, want a refusal", r.version, errDirty)
	}
	first := func(err error) string { s, _, _ := strings.Cut(err.Error(), "\n"); return s }
	return fmt.Sprintf("v0.1: %s\nv0.0.1: %s\nan untracked file: %s", first(errVersion), first(errChangelog), first(errDirty)), nil
}

// release releases the clone at the rehearsal's version, then checks that
// a second release at that version is refused.
func (r *rehearsal) release(ctx context.Context) (string, error) {
	rel, err := release(ctx, r.clone, r.version, indentWriter{w: r.out})
	if err != nil {
		return "", err
	}
	r.rel = rel
	r.user = filepath.Join(r.tmp, "user")
	_, again := release(ctx, r.clone, r.version, io.Discard)
	if again == nil || !strings.Contains(again.Error(), "exists") {
		return "", fmt.Errorf("release %s again: got %v, want a refusal", r.version, again)
	}
	msg, _ := git(ctx, r.clone, "log", "-1", "--format=%s")
	stat, _ := git(ctx, r.clone, "show", "--shortstat", "--format=", "HEAD")
	s, _, _ := strings.Cut(again.Error(), "\n")
	return fmt.Sprintf("the commit: %s (%s)\nagain: %s", msg, strings.TrimSpace(stat), s), nil
}

// tidyCheck runs the clone's .ci/tidy -check at the release commit.
func (r *rehearsal) tidyCheck(ctx context.Context) (string, error) {
	if _, err := run(ctx, r.clone, []string{"GOWORK="}, "bash", ".ci/tidy", "-check"); err != nil {
		return "", err
	}
	return "every module's go.mod and go.sum tidy, the lines of the other modules kept", nil
}

// proxyOfTags makes the module proxy from the tags, and checks every
// tagged module's go.mod and every go.sum line of a module of the
// repository against it.
func (r *rehearsal) proxyOfTags(ctx context.Context) (string, error) {
	ws := r.rel.ws
	r.proxy = proxy{filepath.Join(r.tmp, "proxy")}
	zipHash, modHash, err := r.serveTags(ctx, ws, r.version)
	if err != nil {
		return "", err
	}
	lines := 0
	for _, m := range ws.modules {
		data, err := os.ReadFile(filepath.Join(r.clone, filepath.FromSlash(m.dir), "go.sum"))
		if os.IsNotExist(err) {
			continue
		} else if err != nil {
			return "", err
		}
		for line := range strings.Lines(string(data)) {
			f := strings.Fields(line)
			if len(f) != 3 || ws.byPath[f[0]] == nil {
				continue
			}
			want, ok := zipHash[f[0]], f[1] == r.version
			if f[1] == r.version+"/go.mod" {
				want, ok = modHash[f[0]], true
			}
			if !ok || f[2] != want {
				return "", fmt.Errorf("%s/go.sum: %s: want %s %s, the hash of the tag's zip or go.mod", m.dir, strings.TrimSpace(line), f[0], want)
			}
			lines++
		}
	}
	return fmt.Sprintf("%d modules: %s\neach requires the others at exactly %s\n%d go.sum lines of the repository's modules, each the hash of its tag's zip or go.mod",
		len(zipHash), strings.Join(dirs(ws.tagged()), " "), r.version, lines), nil
}

// serveTags adds the tags of version to the proxy, checks that each
// tagged module requires the repository's modules at exactly version, and
// returns the hashes of their zips and go.mod files, as go.sum has them.
func (r *rehearsal) serveTags(ctx context.Context, ws *workspace, version string) (zipHash, modHash map[string]string, err error) {
	zipHash = make(map[string]string) // module path → go.sum's hash of the zip
	modHash = make(map[string]string) // … of the go.mod
	for _, m := range ws.tagged() {
		tag := m.tag(version)
		when, err := git(ctx, r.clone, "log", "-1", "--format=%cI", tag)
		if err != nil {
			return nil, nil, err
		}
		t, err := time.Parse(time.RFC3339, when)
		if err != nil {
			return nil, nil, err
		}
		if zipHash[m.path], err = r.proxy.add(ctx, r.clone, tag, m, version, t); err != nil {
			return nil, nil, err
		}
		name := r.proxy.modFile(m.path, version)
		if modHash[m.path], err = dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) { return os.Open(name) }); err != nil {
			return nil, nil, err
		}
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, nil, err
		}
		f, err := modfile.Parse(name, data, nil)
		if err != nil {
			return nil, nil, err
		}
		for _, req := range f.Require {
			if o := ws.byPath[req.Mod.Path]; o != nil && (req.Mod.Version != version || !o.tagged) {
				return nil, nil, fmt.Errorf("%s@%s requires %s %s: want each module of the repository at %s, tagged", m.path, version, req.Mod.Path, req.Mod.Version, version)
			}
		}
	}
	return zipHash, modHash, nil
}

// modFile returns the name of the .mod file of path@version in the proxy.
func (p proxy) modFile(modPath, version string) string {
	escPath, _ := module.EscapePath(modPath)
	escVersion, _ := module.EscapeVersion(version)
	return filepath.Join(p.dir, filepath.FromSlash(escPath), "@v", escVersion+".mod")
}

// alone builds and vets every module on its own at the release commit:
// GOWORK=off, -mod=readonly, its requirements from the proxy of the tags
// (then the machine's module cache and GOPROXY) into a module cache of its
// own, each checked against the module's go.sum.
func (r *rehearsal) alone(ctx context.Context) (string, error) {
	ws := r.rel.ws
	proxies := []string{r.proxy.url()}
	if r.cache != "" {
		proxies = append(proxies, r.cache)
	}
	r.modcache = filepath.Join(r.tmp, "modcache")
	env, err := goEnv(ctx, ws.modules[0].path, proxies, r.modcache, "-mod=readonly -modcacherw -trimpath")
	if err != nil {
		return "", err
	}
	r.proxies = proxies
	var done []string
	for _, m := range ws.modules {
		t := time.Now()
		dir := filepath.Join(r.clone, filepath.FromSlash(m.dir))
		if _, err := run(ctx, dir, env, "go", "build", "-o", os.DevNull, "./..."); err != nil {
			return "", fmt.Errorf("%s does not build on its own: %w", m.dir, err)
		}
		if _, err := run(ctx, dir, env, "go", "vet", "./..."); err != nil {
			return "", fmt.Errorf("%s does not vet on its own: %w", m.dir, err)
		}
		done = append(done, fmt.Sprintf("%s %v", m.dir, time.Since(t).Round(100*time.Millisecond)))
	}
	return strings.Join(done, ", "), nil
}

// userEnv returns the environment of a new user's go command: GOWORK=off,
// -mod=mod, the proxy of the tags first, the checksum database off for
// spigot's modules alone.
func (r *rehearsal) userEnv(ctx context.Context, goflags string) ([]string, error) {
	return goEnv(ctx, r.rel.ws.modules[0].path, r.proxies, r.modcache, goflags)
}

// newUser acts as a new user: a module of its own, the README's go get
// lines at the version, the gRPC and Redis programs built and run in it;
// then the quickstart in a module of its own, whose module graph holds
// only the modules whose packages it builds (as .ci/lean checks for a
// program of spigot and the memory store).
func (r *rehearsal) newUser(ctx context.Context) (string, error) {
	ws := r.rel.ws
	env, err := r.userEnv(ctx, "-mod=mod -modcacherw -trimpath")
	if err != nil {
		return "", err
	}
	gets, installs, err := installCommands(r.clone)
	if err != nil {
		return "", err
	}
	got := make(map[string]bool)
	for _, g := range gets {
		got[g[2]] = true
	}
	for _, g := range installs {
		p, _, _ := strings.Cut(g[2], "@")
		got[p] = true
	}
	for _, m := range ws.tagged() {
		if !slices.Contains(strings.Split(m.path, "/"), "internal") && !got[m.path] {
			return "", fmt.Errorf("README.md's install block has no go get or go install of %s", m.path)
		}
	}
	user := r.user
	if err := os.Mkdir(user, 0o777); err != nil {
		return "", err
	}
	if _, err := run(ctx, user, env, "go", "mod", "init", "example.com/user"); err != nil {
		return "", err
	}
	var done []string
	for _, g := range gets {
		if _, err := run(ctx, user, env, "go", "get", g[2]+"@"+r.version); err != nil {
			return "", err
		}
		done = append(done, "go get "+g[2]+"@"+r.version)
	}
	graph, err := run(ctx, user, env, "go", "list", "-m", "-f", "{{.Path}} {{.Version}}", "all")
	if err != nil {
		return "", err
	}
	n := 0
	for line := range strings.Lines(graph) {
		f := strings.Fields(line)
		if len(f) == 2 && ws.byPath[f[0]] != nil {
			if f[1] != r.version {
				return "", fmt.Errorf("go list -m all: %s %s: want every spigot module at %s", f[0], f[1], r.version)
			}
			n++
		}
	}
	done = append(done, fmt.Sprintf("go list -m all: %d modules, the %d of spigot's all at %s", strings.Count(graph, "\n")-1, n, r.version))
	progs, err := rehearsed(r.clone)
	if err != nil {
		return "", err
	}
	for _, p := range progs {
		dir := filepath.Join(user, p.name)
		if p.name == "quickstart" {
			dir = filepath.Join(r.tmp, "quickstart")
			if err := os.Mkdir(dir, 0o777); err != nil {
				return "", err
			}
			if _, err := run(ctx, dir, env, "go", "mod", "init", "example.com/quickstart"); err != nil {
				return "", err
			}
			if _, err := run(ctx, dir, env, "go", "get", gets[0][2]+"@"+r.version); err != nil {
				return "", err
			}
		} else if err := os.Mkdir(dir, 0o777); err != nil {
			return "", err
		}
		what, err := r.runProgram(ctx, p, dir, env)
		if err != nil {
			return "", err
		}
		done = append(done, what)
		if p.name == "quickstart" {
			lean, err := leanGraph(ctx, dir, env)
			if err != nil {
				return "", err
			}
			done = append(done, lean)
		}
	}
	return strings.Join(done, "\n"), nil
}

// leanGraph checks that the module graph of the program in dir holds
// nothing but the modules whose packages it builds, and returns it.
func leanGraph(ctx context.Context, dir string, env []string) (string, error) {
	graph, err := run(ctx, dir, env, "go", "list", "-m", "-f", "{{.Path}}", "all")
	if err != nil {
		return "", err
	}
	built, err := run(ctx, dir, env, "go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".")
	if err != nil {
		return "", err
	}
	mods := strings.Fields(graph)
	var extra []string
	for _, m := range mods[1:] {
		if !slices.Contains(strings.Fields(built), m) {
			extra = append(extra, m)
		}
	}
	if len(extra) > 0 {
		return "", fmt.Errorf("%s: go list -m all has modules whose packages the program does not build: %s", filepath.Base(dir), strings.Join(extra, " "))
	}
	return fmt.Sprintf("quickstart's go list -m all: %s (no module but those whose packages it builds, as .ci/lean allows)", strings.Join(mods, " ")), nil
}

// install runs the README's go install line at the version, into a GOBIN
// of its own, then spigot version and spigot simulate.
func (r *rehearsal) install(ctx context.Context) (string, error) {
	env, err := r.userEnv(ctx, "-modcacherw -trimpath")
	if err != nil {
		return "", err
	}
	gobin := filepath.Join(r.tmp, "bin")
	env = append(env, "GOBIN="+gobin)
	_, installs, err := installCommands(r.clone)
	if err != nil {
		return "", err
	}
	var done []string
	for _, g := range installs {
		p, _, _ := strings.Cut(g[2], "@")
		if _, err := run(ctx, r.tmp, env, "go", "install", p+"@"+r.version); err != nil {
			return "", err
		}
		done = append(done, "go install "+p+"@"+r.version)
	}
	bin := filepath.Join(gobin, "spigot")
	goVersion, err := run(ctx, r.tmp, nil, "go", "env", "GOVERSION")
	if err != nil {
		return "", err
	}
	out, err := run(ctx, r.tmp, nil, bin, "version")
	if err != nil {
		return "", err
	}
	if f := strings.Fields(out); len(f) != 4 || f[0] != "spigot" || f[1] != r.version || f[2] != strings.TrimSpace(goVersion) {
		return "", fmt.Errorf("spigot version: got %q, want \"spigot %s %s GOOS/GOARCH\"", out, r.version, strings.TrimSpace(goVersion))
	}
	done = append(done, "spigot version: "+strings.TrimSpace(out))
	sim, err := run(ctx, r.tmp, nil, bin, "simulate", "-quiet")
	if err != nil {
		return "", err
	}
	first, _, _ := strings.Cut(sim, "\n")
	done = append(done, fmt.Sprintf("spigot simulate -quiet: %d lines, the first %q", strings.Count(sim, "\n"), first))
	return strings.Join(done, "\n"), nil
}

// upgrade releases the clone again, at the next patch version, serves its
// tags, raises one module of the new user's to it (go get of
// store/redis), which raises the core with it and leaves the others
// behind, then all of them with the README's command, and builds the
// user's programs again.
func (r *rehearsal) upgrade(ctx context.Context) (string, error) {
	readme, err := os.ReadFile(filepath.Join(r.clone, "README.md"))
	if err != nil {
		return "", err
	}
	const command = "go get github.com/spigot-go/spigot/...@"
	if !strings.Contains(strings.Join(strings.Fields(string(readme)), " "), command) {
		return "", fmt.Errorf("README.md does not say how to upgrade every module at once (%sVERSION)", command)
	}
	var major, minor, patch int
	fmt.Sscanf(r.version, "v%d.%d.%d", &major, &minor, &patch)
	next := fmt.Sprintf("v%d.%d.%d-rehearsal", major, minor, patch+1)
	rel, err := release(ctx, r.clone, next, io.Discard)
	if err != nil {
		return "", err
	}
	if _, _, err := r.serveTags(ctx, rel.ws, next); err != nil {
		return "", err
	}
	env, err := r.userEnv(ctx, "-mod=mod -modcacherw -trimpath")
	if err != nil {
		return "", err
	}
	versions := func() (map[string]string, error) {
		out, err := run(ctx, r.user, env, "go", "list", "-m", "-f", "{{.Path}} {{.Version}}", "all")
		if err != nil {
			return nil, err
		}
		vs := make(map[string]string)
		for line := range strings.Lines(out) {
			if f := strings.Fields(line); len(f) == 2 && rel.ws.byPath[f[0]] != nil {
				vs[f[0]] = f[1]
			}
		}
		return vs, nil
	}
	root, redis := rel.ws.modules[0].path, rel.ws.modules[0].path+"/store/redis"
	if _, err := run(ctx, r.user, env, "go", "get", redis+"@"+next); err != nil {
		return "", err
	}
	mixed, err := versions()
	if err != nil {
		return "", err
	}
	behind := 0
	for p, v := range mixed {
		if v == r.version {
			behind++
		} else if p != root && p != redis {
			return "", fmt.Errorf("go get %s@%s raised %s to %s", redis, next, p, v)
		}
	}
	if mixed[root] != next || mixed[redis] != next || behind == 0 {
		return "", fmt.Errorf("go get %s@%s: got %v, want the core and store/redis at %s and the others at %s", redis, next, mixed, next, r.version)
	}
	if _, err := run(ctx, r.user, env, "go", "get", command[len("go get "):]+next); err != nil {
		return "", err
	}
	all, err := versions()
	if err != nil {
		return "", err
	}
	for p, v := range all {
		if v != next {
			return "", fmt.Errorf("%s%s: %s is at %s", command, next, p, v)
		}
	}
	if _, err := run(ctx, r.user, env, "go", "build", "-o", os.DevNull, "./..."); err != nil {
		return "", err
	}
	return fmt.Sprintf("release %s: tags %s\ngo get …/store/redis@%s: the core and store/redis at %s, %d modules left at %s\n%s%s: all %d at %s; the user's programs build",
		next, strings.Join(rel.tags, " "), next, next, behind, r.version, command, next, len(all), next), nil
}

// An indentWriter writes to w with a tab at the start of each line.
type indentWriter struct{ w io.Writer }

func (iw indentWriter) Write(p []byte) (int, error) {
	text := strings.TrimSuffix(string(p), "\n")
	if _, err := io.WriteString(iw.w, "\t"+strings.ReplaceAll(text, "\n", "\n\t")+"\n"); err != nil {
		return 0, err
	}
	return len(p), nil
}
