package spigot_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEQuickstart runs the README's quickstart service, as written,
// under quickstartTest, over real connections: every attempt over a new
// connection (so from a new port), on IPv4 and IPv6 loopback; and runs
// each of the README's curl -i commands against it, in a process of its
// own, checking that curl prints what the README shows.
func TestREADMEQuickstart(t *testing.T) {
	var quickstart docBlock
	for _, b := range goBlocks(t) {
		if b.file == "README.md" && b.mark == "quickstart" {
			quickstart = b
		}
	}
	if !strings.Contains(quickstart.code, "func routes(") {
		t.Fatal("README.md has no program marked <!-- go: quickstart --> with func routes(")
	}
	files := map[string]string{"main.go": quickstart.withLine(quickstart.code), "quickstart_test.go": quickstartTest}
	bin := filepath.Join(t.TempDir(), "quickstart.test")
	if err := goCommand(t, files, "test", "-c", "-vet=off", "-o", bin); err != nil {
		t.Fatalf("README.md's quickstart and its test do not build: %v", err)
	}
	cmd := exec.Command(bin, "-test.v", "-test.run", "^Test(LoginOverNewConnections|ResetOnSuccess|Export)$")
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("README.md's quickstart: %v\n%s", err, out)
	}
	t.Logf("%s", out)

	blocks := readmeCurls(t)
	if len(blocks) < 3 {
		t.Fatalf("README.md shows %d curl -i commands; want the quickstart's 3", len(blocks))
	}
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("SPIGOT_REQUIRE_SERVERS") != "" {
			t.Fatalf("curl not found, and SPIGOT_REQUIRE_SERVERS is set")
		}
		t.Skip("curl not found: the README's curl -i commands not run")
	}
	js, _ := json.Marshal(blocks)
	cmd = exec.Command(bin, "-test.v", "-test.run", "^TestCurl$")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "SPIGOT_README_CURL="+string(js))
	out, err = cmd.CombinedOutput()
	if err != nil {
		t.Errorf("README.md's curl -i commands: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// readmeCurls returns the README's blocks that show a curl -i command:
// the command (after "$ ") and what it prints.
func readmeCurls(t *testing.T) [][2]string {
	t.Helper()
	var curls [][2]string
	for _, b := range docBlocks(t, "README.md") {
		if command, output, ok := strings.Cut(b.code, "\n"); ok && b.info == "" && strings.HasPrefix(command, "$ curl -i ") {
			curls = append(curls, [2]string{strings.TrimPrefix(command, "$ "), output})
		}
	}
	return curls
}

// quickstartTest is a test of the README's quickstart program, compiled
// with it: it serves its routes() on loopback.
const quickstartTest = `package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// post sends one attempt over a new connection, and returns its status
// and headers.
func post(t *testing.T, client *http.Client, url_ string, user, password string) (int, http.Header) {
	t.Helper()
	resp, err := client.PostForm(url_, url.Values{"user": {user}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// get sends a GET with an API key, and returns its status and headers.
func get(t *testing.T, client *http.Client, url_, apiKey string) (int, http.Header) {
	t.Helper()
	req, _ := http.NewRequest("GET", url_, nil)
	req.Header.Set("X-Api-Key", apiKey)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

func TestLoginOverNewConnections(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{} // RemoteAddr, with its port
	service := routes()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.RemoteAddr] = true
		mu.Unlock()
		service.ServeHTTP(w, r)
	})
	attempts := 0
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("%s: %v: not tested on it", addr, err)
			continue
		}
		srv := httptest.NewUnstartedServer(handler)
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		defer srv.Close()
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		start := time.Now()
		alice := "alice@" + addr // an account of its own on each address

		// One account: 5 wrong passwords, then 429 until it refills.
		for i := range 7 {
			attempts++
			status, h := post(t, client, srv.URL+"/login", alice, "wrong")
			switch {
			case i < 5 && status != http.StatusUnauthorized:
				t.Errorf("%s: alice's attempt %d: status %d; want 401", addr, i+1, status)
			case i >= 5 && status != http.StatusTooManyRequests:
				t.Errorf("%s: alice's attempt %d: status %d; want 429", addr, i+1, status)
			case i >= 5:
				if s, err := strconv.Atoi(h.Get("Retry-After")); err != nil || s < 1 || s > 60 {
					t.Errorf("%s: attempt %d: Retry-After %q; want 1 to 60 seconds", addr, i+1, h.Get("Retry-After"))
				}
				if h.Get("X-Ratelimit-Limit") != "5" || h.Get("X-Ratelimit-Remaining") != "0" {
					t.Errorf("%s: attempt %d: X-RateLimit-Limit %q, -Remaining %q; want the account's, 5 and 0", addr, i+1, h.Get("X-Ratelimit-Limit"), h.Get("X-Ratelimit-Remaining"))
				}
			}
			if got, want := h.Get("Ratelimit-Policy"), "\"api-ip\";q=60;w=60, \"login-user\";q=5;w=300"; got != want {
				t.Errorf("%s: attempt %d: RateLimit-Policy %s; want %s", addr, i+1, got, want)
			}
		}
		// The right password is admitted? No: the account is out of
		// tokens, and a success does not skip the limit.
		if status, _ := post(t, client, srv.URL+"/login", alice, "hunter2"); status != http.StatusTooManyRequests {
			t.Errorf("%s: alice's right password while limited: status %d; want 429", addr, status)
		}
		attempts++
		// Many accounts from one address: the address's 60, less the 5
		// alice's admitted attempts took (her denied ones took nothing),
		// plus one a second that the test took.
		var unauthorized, limited int
		for i := range 60 {
			attempts++
			switch status, _ := post(t, client, srv.URL+"/login", "user-"+strconv.Itoa(i), "wrong"); status {
			case http.StatusUnauthorized:
				unauthorized++
			case http.StatusTooManyRequests:
				limited++
			default:
				t.Errorf("%s: attempt %d: status %d", addr, i, status)
			}
		}
		most := 55 + int(time.Since(start)/time.Second)
		if unauthorized < 55 || unauthorized > most || limited != 60-unauthorized {
			t.Errorf("%s: 60 accounts from one address: %d got 401 and %d got 429; want 55 to %d 401s and 429 for the rest", addr, unauthorized, limited, most)
		}
	}
	if len(seen) < attempts {
		t.Errorf("%d attempts came from %d client addresses; want each from a new port", attempts, len(seen))
	}
}

// TestResetOnSuccess: a right password forgives the account's failures.
func TestResetOnSuccess(t *testing.T) {
	srv := httptest.NewServer(routes())
	defer srv.Close()
	// From an address of its own, whose budget the other test did not use.
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	for i := range 4 {
		if status, _ := post(t, client, srv.URL+"/login", "bob", "wrong"); status != http.StatusUnauthorized {
			t.Fatalf("bob's attempt %d: status %d; want 401", i+1, status)
		}
	}
	if status, _ := post(t, client, srv.URL+"/login", "bob", "hunter2"); status != http.StatusNoContent {
		t.Fatalf("bob's right password: status %d; want 204", status)
	}
	if _, h := post(t, client, srv.URL+"/login", "bob", "wrong"); h.Get("X-Ratelimit-Remaining") == "" {
		t.Fatalf("no X-RateLimit-Remaining")
	} else if rl := h.Get("Ratelimit"); !strings.Contains(rl, "\"login-user\";r=4;") {
		t.Errorf("after a success, RateLimit %s; want the account full again less this attempt: r=4", rl)
	}
}

// TestExport: an export costs its API key its rows, and the address 1;
// other routes cost the address alone.
func TestExport(t *testing.T) {
	srv := httptest.NewServer(routes())
	defer srv.Close()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}
	client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	for i, c := range []struct {
		target  string
		key     string
		status  int
		members string // the RateLimit members' names
	}{
		{"/export?rows=60000", "k1", 200, "api-ip export-rows"},
		{"/export?rows=50000", "k1", 429, "api-ip export-rows"},
		{"/export?rows=40000", "k2", 200, "api-ip export-rows"}, // another key: its own quota
		{"/export?rows=0", "k1", 200, "api-ip"},                 // costs the key nothing
		{"/export?rows=abc", "k1", 400, ""},                     // charged nothing
		{"/export?rows=-5", "k1", 400, ""},
		{"/nothing", "k1", 404, "api-ip"}, // no route: the address alone
	} {
		status, h := get(t, client, srv.URL+c.target, c.key)
		var names []string
		for _, m := range regexp.MustCompile("\"([^\"]*)\";").FindAllStringSubmatch(h.Get("Ratelimit"), -1) {
			names = append(names, m[1])
		}
		if got := strings.Join(names, " "); status != c.status || got != c.members {
			t.Errorf("step %d: GET %s: got %d %q; want %d %q", i+1, c.target, status, got, c.status, c.members)
		}
	}
}

// TestCurl runs each curl -i command of the README (in SPIGOT_README_CURL)
// against routes() on loopback, after the requests that the README's
// story has sent before it, and checks that curl prints what the README
// shows: the same lines, but for Date, and the same numbers, but for
// those that time moves (the seconds of t, Retry-After and
// X-RateLimit-Reset, the tokens refilled meanwhile), within the seconds
// the test took.
func TestCurl(t *testing.T) {
	var blocks [][2]string
	if err := json.Unmarshal([]byte(os.Getenv("SPIGOT_README_CURL")), &blocks); err != nil || len(blocks) == 0 {
		t.Fatalf("SPIGOT_README_CURL: %v", err)
	}
	srv := httptest.NewServer(routes())
	defer srv.Close()
	client := &http.Client{}
	host := strings.TrimPrefix(srv.URL, "http://")
	start := time.Now()
	for i, b := range blocks {
		command, want := b[0], b[1]
		switch {
		case strings.Contains(command, "/login"):
			for range 5 { // the five wrong passwords before the sixth
				if status, _ := post(t, client, srv.URL+"/login", "alice", "wrong"); status != http.StatusUnauthorized {
					t.Fatalf("curl %d: a wrong password before it: status %d; want 401", i+1, status)
				}
			}
		case strings.Contains(command, "rows=50000"):
			if status, _ := get(t, client, srv.URL+"/export?rows=60000", "k1"); status != http.StatusOK {
				t.Fatalf("curl %d: an export of 60000 rows before it: status %d; want 200", i+1, status)
			}
		}
		out, err := exec.Command("sh", "-c", strings.ReplaceAll(command, "localhost:8080", host)).Output()
		if err != nil {
			t.Fatalf("curl %d: %s: %v", i+1, command, err)
		}
		elapsed := time.Since(start)
		slack := int64(elapsed/time.Second) + 1
		// What is left may have grown by what the fastest limit refilled.
		tokens := slack
		for _, l := range []spigot.Limit{perAddress, perAccount, perAPIKey} {
			if scale, refill := store.Scaled(l); scale > 0 {
				tokens = max(tokens, refill*(elapsed.Microseconds()+1)/scale+1)
			}
		}
		if diff := compare(string(out), want, slack, tokens); diff != "" {
			t.Errorf("curl %d: $ %s\nprinted:\n%s\nREADME.md shows:\n%s\n%s", i+1, command, out, want, diff)
		}
	}
}

var (
	number = regexp.MustCompile("[0-9]+")
	// moving matches the lines whose numbers time moves: the fields of
	// what is left and when, and the body's retry seconds.
	moving = regexp.MustCompile("^(Ratelimit|Retry-After|X-Ratelimit-Remaining|X-Ratelimit-Reset): |retry")
)

// remainingAt reports, for each number of line, whether it counts what
// is left (an r= or X-RateLimit-Remaining) rather than seconds.
func remainingAt(line string) []bool {
	var left []bool
	for _, m := range number.FindAllStringIndex(line, -1) {
		left = append(left, strings.HasSuffix(line[:m[0]], "r=") || strings.HasPrefix(line, "X-Ratelimit-Remaining: "))
	}
	return left
}

// compare returns "" when got (curl's output) is what want (the README's)
// shows, or what differs: every line but Date, in order, with the
// numbers that time moves within slack seconds, or tokens for what is
// left, of each other.
func compare(got, want string, slack, tokens int64) string {
	lines := func(s string) []string {
		var out []string
		for _, l := range strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
			if !strings.HasPrefix(l, "Date: ") {
				out = append(out, l)
			}
		}
		return out
	}
	g, w := lines(strings.TrimRight(got, "\n")), lines(strings.TrimRight(want, "\n"))
	if len(g) != len(w) {
		return fmt.Sprintf("%d lines; want %d", len(g), len(w))
	}
	for i := range g {
		if g[i] == w[i] {
			continue
		}
		gn, wn := number.FindAllString(g[i], -1), number.FindAllString(w[i], -1)
		if !moving.MatchString(w[i]) || number.ReplaceAllString(g[i], "#") != number.ReplaceAllString(w[i], "#") || len(gn) != len(wn) {
			return fmt.Sprintf("line %d: %q; want %q", i+1, g[i], w[i])
		}
		left := remainingAt(w[i])
		for j := range gn {
			a, _ := strconv.ParseInt(gn[j], 10, 64)
			b, _ := strconv.ParseInt(wn[j], 10, 64)
			d := slack
			if left[j] {
				d = tokens
			}
			if a < b-d || a > b+d {
				return fmt.Sprintf("line %d: %q; want %q (seconds within %d, tokens within %d)", i+1, g[i], w[i], slack, tokens)
			}
		}
	}
	return ""
}
`
