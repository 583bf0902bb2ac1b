package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

// A rehearsal is one run of rehearse.
type rehearsal struct {
	root    string // the repository rehearsed
	tmp     string // where everything the rehearsal makes goes
	clone   string
	version string
	out     io.Writer
	redis   string // the address of the Redis server it started
	cache   string // the machine's module cache as a file:// GOPROXY entry, or ""
	start   time.Time

	rel      *released // what the release made
	proxy    proxy     // of the tags
	proxies  []string  // GOPROXY's entries before the machine's: the proxy of the tags, the machine's module cache
	modcache string    // the module cache of the builds from the proxy of the tags
	user     string    // the new user's module
}

// rehearse rehearses a release of HEAD of the repository at root at
// version ("": the next patch of the latest release, as a pre-release
// -rehearsal), in a temporary directory that it removes unless keep.
func rehearse(ctx context.Context, root, version string, keep bool, out io.Writer) (err error) {
	r := &rehearsal{root: root, version: version, out: out, start: time.Now()}
	if r.root, err = filepath.Abs(root); err != nil {
		return err
	}
	if r.tmp, err = os.MkdirTemp("", "spigot-rehearsal-"); err != nil {
		return err
	}
	if keep {
		defer fmt.Fprintf(out, "rehearse: kept %s\n", r.tmp)
	} else {
		defer os.RemoveAll(r.tmp)
	}
	if r.cache, err = machineModcacheProxy(ctx); err != nil {
		return err
	}
	stop, err := r.startRedis(ctx)
	if err != nil {
		return err
	}
	defer stop()
	for _, step := range []struct {
		what string
		do   func(context.Context) (string, error)
	}{
		{"a clone of HEAD", r.cloneHead},
		{"the README's programs from the clone, each a module added to its workspace (go work use .)", r.fromClone},
		{"release refuses a version that is not semantic, one the changelog lacks and a tree with changes", r.refusals},
		{"the release", r.release},
		{".ci/tidy -check after the release commit", r.tidyCheck},
		{"a module proxy of the tags, and the go.sum lines of the modules against it", r.proxyOfTags},
		{"every module builds and vets on its own (GOWORK=off) at the release commit, from that proxy", r.alone},
		{"a new user: the README's go get lines and the README's programs, no replace, from that proxy", r.newUser},
		{"go install …/cmd/spigot@" + "VERSION, spigot version and spigot simulate", r.install},
		{"an upgrade: the next release, one module of the new user's raised to it, then all of them as the README says", r.upgrade},
	} {
		t := time.Now()
		what := strings.ReplaceAll(step.what, "VERSION", r.version)
		fmt.Fprintf(out, "rehearse: %s\n", what)
		done, err := step.do(ctx)
		if err != nil {
			return fmt.Errorf("rehearse: %s: %w", what, err)
		}
		if done != "" {
			fmt.Fprintf(out, "%s\n", indent(done))
		}
		fmt.Fprintf(out, "\t(%v)\n", time.Since(t).Round(100*time.Millisecond))
	}
	fmt.Fprintf(out, "rehearse: %s passed in %v\n", r.version, time.Since(r.start).Round(time.Second))
	return nil
}

// cloneHead clones the repository at HEAD, and chooses the version.
func (r *rehearsal) cloneHead(ctx context.Context) (string, error) {
	head, err := git(ctx, r.root, "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	r.clone = filepath.Join(r.tmp, "spigot")
	if _, err := git(ctx, r.tmp, "clone", "-q", r.root, r.clone); err != nil {
		return "", err
	}
	if _, err := git(ctx, r.clone, "checkout", "-q", "--detach", head); err != nil {
		return "", err
	}
	for _, kv := range [][2]string{{"user.name", "spigot release rehearsal"}, {"user.email", "rehearsal@localhost"}} {
		if v, _ := git(ctx, r.clone, "config", kv[0]); v == "" {
			if _, err := git(ctx, r.clone, "config", kv[0], kv[1]); err != nil {
				return "", err
			}
		}
	}
	if r.version == "" {
		tags, err := git(ctx, r.clone, "tag", "--list", "v*")
		if err != nil {
			return "", err
		}
		latest := "v0.0.0"
		for _, t := range strings.Fields(tags) {
			if semver.IsValid(t) && semver.Prerelease(t) == "" && semver.Compare(t, latest) > 0 {
				latest = t
			}
		}
		if latest == "v0.0.0" {
			r.version = "v0.1.0-rehearsal"
		} else {
			var major, minor, patch int
			fmt.Sscanf(latest, "v%d.%d.%d", &major, &minor, &patch)
			r.version = fmt.Sprintf("v%d.%d.%d-rehearsal", major, minor, patch+1)
		}
	}
	if err := checkVersion(r.version); err != nil {
		return "", err
	}
	note := ""
	if status, _ := git(ctx, r.root, "status", "--porcelain"); status != "" {
		note = "; the tree's uncommitted changes are not in it"
	}
	return fmt.Sprintf("HEAD %s, rehearsed at %s%s", head[:12], r.version, note), nil
}

// startRedis starts a redis-server on a free loopback port, and returns
// the function that stops it.
func (r *rehearsal) startRedis(ctx context.Context) (stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("rehearse: redis-server not found: the guides' Redis programs need one (.ci/run installs it)")
	}
	dir := filepath.Join(r.tmp, "redis")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		_, port, _ := net.SplitHostPort(addr)
		p, err := startProc(ctx, exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir))
		if err != nil {
			return nil, err
		}
		err = p.waitListening(ctx, addr, func(c net.Conn) bool {
			fmt.Fprint(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			return line == "+PONG\r\n"
		})
		if err == nil {
			r.redis = addr
			return p.stop, nil
		}
		p.stop()
		if try == 3 {
			return nil, fmt.Errorf("rehearse: redis-server on %s: %v", addr, err)
		}
		// Another process took the port: try another.
	}
}

// freeAddr returns a loopback address whose port was free.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// A proc is a process that the rehearsal started.
type proc struct {
	cmd  *exec.Cmd
	out  bytes.Buffer  // its standard output and error, to read once done is closed
	done chan struct{} // closed once it has exited
}

// startProc starts cmd, which the rehearsal must stop.
func startProc(ctx context.Context, cmd *exec.Cmd) (*proc, error) {
	p := &proc{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	context.AfterFunc(ctx, func() { cmd.Process.Kill() })
	return p, nil
}

// stop kills the process and waits until it has exited.
func (p *proc) stop() {
	p.cmd.Process.Kill()
	<-p.done
}

// errExited is the error of a process that exited before it listened: on
// a port another process took, say.
var errExited = errors.New("exited before it listened")

// waitListening waits until the process accepts a connection on addr on
// which ready returns true, for 30 seconds at most, and fails if the
// process exits first.
func (p *proc) waitListening(ctx context.Context, addr string, ready func(net.Conn) bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			ok := ready(c)
			c.Close()
			select {
			case <-p.done: // what answered is another process
			default:
				if ok {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not listening on %s after 30s", filepath.Base(p.cmd.Path), addr)
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s: %w on %s: %v\n%s", filepath.Base(p.cmd.Path), errExited, addr, p.cmd.ProcessState, indent(p.out.String()))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
