package spigot_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/spigot-go/spigot/internal/testserver"
)

// The README and the guides in docs/ are Markdown whose every Go block is
// compiled, and run where it can be, by the tests of this file. A block is
// one of:
//
//   - a whole program (it starts with "package main") that prints what its
//     "// Output:" comment says: built and run, its output compared;
//   - such a program marked <!-- go: run with ENV --> just before its
//     fence: run with the servers of ENV (see docEnvs) in its environment;
//   - the README's quickstart, marked <!-- go: quickstart -->: built and run
//     as a service by TestREADMEQuickstart;
//   - a program marked <!-- go: not run: why -->: built only;
//   - a snippet marked <!-- go: snippet FRAME -->: compiled inside
//     snippetFrames[FRAME];
//   - a block marked <!-- go: not a program: why -->: neither.
//
// Any other Go block fails TestDocBlocks, so no block goes unchecked.

// repoRoot is the repository's root, from this package's directory.
var repoRoot = filepath.Join("..", "..")

// docFiles returns the README and every guide under docs/, as paths from
// the repository's root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(repoRoot, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// A docBlock is one fenced block of a Markdown file.
type docBlock struct {
	file string // from the repository's root
	line int    // of the first line inside the fence, from 1
	info string // the fence's info string: "go", "" …
	mark string // the <!-- go: … --> comment just before the fence, without its delimiters
	code string
}

func (b docBlock) String() string { return fmt.Sprintf("%s:%d", b.file, b.line-1) }

// kind returns what the block is, by its mark and code, or an error
// saying why it is none of the kinds a Go block may be.
func (b docBlock) kind() (kind, arg string, err error) {
	program := strings.HasPrefix(b.code, "package main\n")
	_, _, output := strings.Cut(b.code, "\t// Output:\n")
	verb, arg, _ := strings.Cut(b.mark, " ")
	switch {
	case b.mark == "" && program && output:
		return "run", "", nil
	case b.mark == "" && program:
		return "", "", fmt.Errorf("a program with no // Output: comment: give it one, or mark it <!-- go: not run: why -->")
	case b.mark == "":
		return "", "", fmt.Errorf("neither a program (package main) nor marked <!-- go: snippet FRAME --> or <!-- go: not a program: why -->")
	case b.mark == "quickstart" && program:
		return "quickstart", "", nil
	case strings.HasPrefix(b.mark, "run with ") && program && output:
		env := strings.TrimPrefix(b.mark, "run with ")
		if _, ok := docEnvs[env]; !ok {
			return "", "", fmt.Errorf("run with %q: no such environment in docEnvs", env)
		}
		return "run", env, nil
	case strings.HasPrefix(b.mark, "not run: ") && program && !output:
		return "build", "", nil
	case verb == "snippet" && !program:
		if _, ok := snippetFrames[arg]; !ok {
			return "", "", fmt.Errorf("snippet %q: no such frame in snippetFrames", arg)
		}
		return "snippet", arg, nil
	case strings.HasPrefix(b.mark, "not a program: ") && !program:
		return "none", "", nil
	}
	return "", "", fmt.Errorf("mark <!-- go: %s --> does not fit the block (a program: %v, with // Output: %v)", b.mark, program, output)
}

var (
	fence   = regexp.MustCompile("^( *)(```+|~~~+)\\s*([^`\\s]*)")
	goMark  = regexp.MustCompile(`^<!-- go: (.+) -->$`)
	anyMark = regexp.MustCompile(`<!-- *go:`)
)

// docBlocks returns the fenced blocks of file, and reports to t a fence
// left open and a go: mark that no block follows.
func docBlocks(t *testing.T, file string) []docBlock {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docBlock
	var open *docBlock
	var indent, closing, mark string
	markLine := 0
	sc := bufio.NewScanner(strings.NewReader(string(text)))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if open != nil {
			if trimmed := strings.TrimSpace(line); strings.HasPrefix(trimmed, closing) && strings.Trim(trimmed, closing[:1]) == "" {
				blocks = append(blocks, *open)
				open = nil
				continue
			}
			open.code += strings.TrimPrefix(line, indent) + "\n"
			continue
		}
		if m := fence.FindStringSubmatch(line); m != nil {
			open = &docBlock{file: file, line: n + 1, info: m[3], mark: mark}
			indent, closing, mark, markLine = m[1], m[2], "", 0
			continue
		}
		if mark != "" && strings.TrimSpace(line) != "" {
			t.Errorf("%s:%d: <!-- go: %s --> is not just before a fence", file, markLine, mark)
			mark, markLine = "", 0
		}
		if m := goMark.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			mark, markLine = m[1], n
		} else if anyMark.MatchString(codeSpan.ReplaceAllString(line, "")) {
			t.Errorf("%s:%d: a go: mark is a line of its own, <!-- go: … -->", file, n)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if open != nil {
		t.Errorf("%s: the fence opened at line %d is never closed", file, open.line-1)
	}
	if mark != "" {
		t.Errorf("%s:%d: <!-- go: %s --> is not just before a fence", file, markLine, mark)
	}
	return blocks
}

// goBlocks returns every Go block of the README and the guides, and
// reports to t every block that is Go but not tagged go, and every mark on
// a block that is not Go.
func goBlocks(t *testing.T) []docBlock {
	t.Helper()
	var out []docBlock
	for _, file := range docFiles(t) {
		for _, b := range docBlocks(t, file) {
			switch {
			case b.info == "go":
				out = append(out, b)
			case strings.EqualFold(b.info, "go") || strings.EqualFold(b.info, "golang"):
				t.Errorf("%v: a Go block tagged %q: tag it go", b, b.info)
			case strings.HasPrefix(b.code, "package "):
				t.Errorf("%v: Go code in a block tagged %q: tag it go", b, b.info)
			case b.mark != "":
				t.Errorf("%v: <!-- go: %s --> on a block that is not Go", b, b.mark)
			}
		}
	}
	return out
}

// TestDocBlocks checks that every Go block of the README and the guides is
// one that the other tests of this file compile, and run where it can be
// run, and that the programs run today are all still there.
func TestDocBlocks(t *testing.T) {
	counts := map[string]int{}
	frames := map[string]bool{}
	var runs []docBlock
	for _, b := range goBlocks(t) {
		kind, arg, err := b.kind()
		if err != nil {
			t.Errorf("%v: %v", b, err)
			continue
		}
		counts[kind]++
		switch kind {
		case "snippet":
			frames[arg] = true
		case "run":
			runs = append(runs, b)
		case "quickstart":
			if b.file != "README.md" {
				t.Errorf("%v: the quickstart is the README's", b)
			}
		}
	}
	t.Logf("Go blocks: %d programs run, %d built only, %d quickstart, %d snippets, %d marked as not programs",
		counts["run"], counts["build"], counts["quickstart"], counts["snippet"], counts["none"])
	if counts["quickstart"] != 1 {
		t.Errorf("%d blocks marked <!-- go: quickstart -->; want the README's one", counts["quickstart"])
	}
	for name := range snippetFrames {
		if !frames[name] {
			t.Errorf("snippetFrames[%q] frames no snippet: remove it", name)
		}
	}
	for _, want := range docRuns {
		if !slices.ContainsFunc(runs, func(b docBlock) bool { return b.file == want.file && strings.Contains(b.code, want.text) }) {
			t.Errorf("%s has no program with // Output: that contains %q", want.file, want.text)
		}
	}
}

// docRuns are programs that must be in the guides and be run: a change of
// layout moves them, never drops them.
var docRuns = []struct{ file, text string }{
	{"docs/algorithms.md", "spigot.NewSlidingLog"},
	{"docs/limits.md", "spigot.NewGroup"},
	{"docs/grpc.md", "grpclimit.New("},
	{"docs/redis.md", "spigotvalkey.New("},
	{"docs/clusters.md", "NewClusterClient"},
}

// docEnvs are the environments a program marked <!-- go: run with ENV -->
// runs in: each starts what the program needs and returns the variables
// that tell the program where it is.
var docEnvs = map[string]func(t *testing.T) []string{
	"redis": func(t *testing.T) []string {
		return []string{"REDIS_ADDR=" + testserver.Start(t, testserver.Redis).Addr}
	},
	"cluster": func(t *testing.T) []string {
		cl := testserver.StartCluster(t, testserver.Redis)
		return []string{"CLUSTER_SEEDS=" + strings.Join(cl.Addrs()[:2], ",")}
	},
}

// withLine returns code preceded by a line directive naming b's file and
// line, so that the compiler reports an error where the Markdown has it.
func (b docBlock) withLine(code string) string {
	return fmt.Sprintf("//line %s:%d\n%s", filepath.Join(repoRoot, b.file), b.line, code)
}

// TestDocPrograms builds every program of the README and the guides but
// the quickstart (TestREADMEQuickstart's), and runs each one that has an
// "// Output:" comment, checking that it prints what the comment says.
func TestDocPrograms(t *testing.T) {
	for _, b := range goBlocks(t) {
		kind, env, err := b.kind()
		if err != nil || (kind != "run" && kind != "build") {
			continue // TestDocBlocks reports the errors
		}
		t.Run(strings.ReplaceAll(b.String(), "/", "_"), func(t *testing.T) {
			if kind == "build" {
				if err := buildProgram(t, b.withLine(b.code), os.DevNull); err != nil {
					t.Errorf("%v: the program does not build: %v", b, err)
				}
				return
			}
			var vars []string
			if env != "" {
				vars = docEnvs[env](t)
			}
			runProgram(t, b, vars...)
		})
	}
}

// runProgram builds and runs b's program with env added to its
// environment, and checks that it prints what its "// Output:" comment
// says.
func runProgram(t *testing.T, b docBlock, env ...string) {
	t.Helper()
	_, comment, _ := strings.Cut(b.code, "\t// Output:\n")
	var want strings.Builder
	for _, line := range strings.Split(comment, "\n") {
		text, ok := strings.CutPrefix(strings.TrimSpace(line), "//")
		if !ok {
			break
		}
		want.WriteString(strings.TrimPrefix(text, " ") + "\n")
	}
	bin := filepath.Join(t.TempDir(), "example")
	if err := buildProgram(t, b.withLine(b.code), bin); err != nil {
		t.Fatalf("%v: the program does not build: %v", b, err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: the program: %v\n%s", b, err, got)
	}
	if string(got) != want.String() {
		t.Errorf("%v: the program printed\n%s\nwant\n%s", b, got, want.String())
	}
}

// TestDocSnippets compiles every snippet of the README and the guides,
// each inside its frame, all in one package.
func TestDocSnippets(t *testing.T) {
	files := map[string]string{"main.go": "package main\n\nfunc main() {}\n"}
	for i, b := range goBlocks(t) {
		kind, frame, err := b.kind()
		if err != nil || kind != "snippet" {
			continue
		}
		files[fmt.Sprintf("snippet%d.go", i)] = snippetFrames[frame].source(b, i)
	}
	if len(files) == 1 {
		t.Fatal("no snippet in the README and the guides")
	}
	if err := goCommand(t, files, "build", "-o", os.DevNull); err != nil {
		t.Errorf("the snippets do not compile: %v", err)
	}
}

// A snippetFrame is what a snippet is compiled in: a function of a
// package main with imports, whose parameters give the snippet what it
// uses and whose last lines (after) use what it declares.
type snippetFrame struct {
	imports []string // import specs: "context", goredis "github.com/…"
	params  string
	after   string
}

// snippetFrames are the frames of the snippets, by the name their mark
// gives.
var snippetFrames = map[string]snippetFrame{
	"limiter": {
		imports: []string{`"context"`, spigotPkg, `"github.com/spigot-go/spigot/store/memory"`},
		params:  "ctx context.Context, perAddress spigot.Limit, clientIP string",
	},
	"costs": {
		imports: []string{`"context"`, spigotPkg},
		params:  "ctx context.Context, store spigot.Store, accountID string, rows []string, failed int64",
		after:   "_, _ = d, err",
	},
	"proxy": {
		imports: []string{`"net/netip"`, `"github.com/spigot-go/spigot/httplimit"`},
		params:  "prefix netip.Prefix",
		after:   "_ = key",
	},
	"transport": {
		imports: []string{`"net/http"`, goredisPkg, spigotPkg, `"github.com/spigot-go/spigot/httplimit"`, `"github.com/spigot-go/spigot/store/redis"`},
		params:  "rdb *goredis.Client",
		after:   "var _ *http.Client = client",
	},
	"hybrid": {
		imports: []string{goredisPkg, spigotPkg, hybridPkg, memoryPkg, spigotredisPkg},
		params:  "rdb *goredis.Client, login spigot.Limit",
		after:   "_ = limiter",
	},
	"lease": {
		imports: []string{`"context"`, goredisPkg, spigotPkg, `"github.com/spigot-go/spigot/store/lease"`, spigotredisPkg},
		params:  "rdb *goredis.Client, perTenant spigot.Limit",
		after:   "_ = limiter",
	},
	"denycache": {
		imports: []string{spigotPkg, `"github.com/spigot-go/spigot/store/denycache"`, hybridPkg, memoryPkg},
		params:  "remote spigot.Store, login spigot.Limit",
		after:   "_ = limiter",
	},
	"otel": {
		imports: []string{
			`"net/http"`,
			`"github.com/prometheus/client_golang/prometheus"`,
			`"github.com/prometheus/client_golang/prometheus/promhttp"`,
			goredisPkg,
			`otelprom "go.opentelemetry.io/otel/exporters/prometheus"`,
			`sdkmetric "go.opentelemetry.io/otel/sdk/metric"`,
			spigotPkg,
			`"github.com/spigot-go/spigot/otelspigot"`,
			hybridPkg, memoryPkg, spigotredisPkg,
		},
		params: "rdb *goredis.Client, login spigot.Limit",
		after:  "_ = limiter",
	},
}

const (
	spigotPkg      = `"github.com/spigot-go/spigot"`
	goredisPkg     = `goredis "github.com/redis/go-redis/v9"`
	hybridPkg      = `"github.com/spigot-go/spigot/store/hybrid"`
	memoryPkg      = `"github.com/spigot-go/spigot/store/memory"`
	spigotredisPkg = `spigotredis "github.com/spigot-go/spigot/store/redis"`
)

// source returns the file of the snippet b in frame f, as func snippetN.
func (f snippetFrame) source(b docBlock, n int) string {
	return fmt.Sprintf("package main\n\nimport (\n\t%s\n)\n\nfunc snippet%d(%s) {\n%s//line snippet%d.go:1\n%s\n}\n",
		strings.Join(f.imports, "\n\t"), n, f.params, b.withLine(b.code), n, f.after)
}

// buildProgram builds src as a program of this module (so that it imports
// this tree's packages, with the stores' clients this module requires)
// into out, or os.DevNull.
func buildProgram(t *testing.T, src, out string) error {
	t.Helper()
	return goCommand(t, map[string]string{"main.go": src}, "build", "-o", out)
}

// goCommand runs the go command (build, test) on a package of this module
// made of files (name → source), without writing into the source tree: an
// overlay puts them in internal/readme.
func goCommand(t *testing.T, files map[string]string, args ...string) error {
	t.Helper()
	dir := t.TempDir()
	wd, _ := os.Getwd()
	replace := map[string]string{}
	for name, src := range files {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		replace[filepath.Join(wd, "internal", "readme", name)] = file
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": replace})
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	args = append(args, "-overlay", overlayFile, "./internal/readme")
	if output, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return &buildError{err, output}
	}
	return nil
}

type buildError struct {
	err    error
	output []byte
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + string(e.output) }

// TestREADMELength checks that the README stays a front door: what the
// rest would take belongs in a guide of docs/.
func TestREADMELength(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > 400 {
		t.Errorf("README.md has %d lines; want at most 400: move the details to a guide in docs/", n)
	}
}

// TestREADMECommands checks the README's two commands: the demo, and the
// test command that CI runs (.ci/run's go test over every module, with
// SPIGOT_REQUIRE_SERVERS=1), and that the README names every program
// that .ci/run installs for the tests.
func TestREADMECommands(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(filepath.Join(repoRoot, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	all := regexp.MustCompile(`(?m)^all=(\S+)$`).FindSubmatch(ci)
	test := regexp.MustCompile(`(?m)^go test .*$`).FindAll(ci, -1)
	if all == nil || len(test) != 1 || !regexp.MustCompile(`(?m)^export SPIGOT_REQUIRE_SERVERS=1$`).Match(ci) {
		t.Fatalf(".ci/run: want one all=… line, one go test line and export SPIGOT_REQUIRE_SERVERS=1; found %q and %q", all, test)
	}
	want := "SPIGOT_REQUIRE_SERVERS=1 " + strings.ReplaceAll(string(test[0]), `"$all"`, string(all[1]))
	var commands string
	for _, b := range docBlocks(t, "README.md") {
		if b.info == "" && strings.Contains(b.code, "go run ./cmd/spigot demo") {
			commands = b.code
		}
	}
	if commands == "" {
		t.Fatal("README.md has no block with the command go run ./cmd/spigot demo")
	}
	if !slices.Contains(strings.Split(commands, "\n"), want) {
		t.Errorf("README.md's two commands:\n%s\nwant a line with CI's test command:\n%s", commands, want)
	}
	tools := regexp.MustCompile(`command -v (\S+)`).FindAllSubmatch(ci, -1)
	if len(tools) == 0 {
		t.Fatal(".ci/run checks for no program with command -v")
	}
	for _, tool := range tools {
		if !strings.Contains(string(readme), "`"+string(tool[1])+"`") {
			t.Errorf("README.md does not name %s, which .ci/run installs for the tests", tool[1])
		}
	}
}

// mdLink matches a Markdown link or image, [text](target) or
// ![text](target), and a reference definition, [label]: target.
var mdLink = regexp.MustCompile(`(?s)!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)|(?m)^ {0,3}\[[^\]]+\]:\s*(\S+)`)

// TestDocLinks checks that every relative link of the README and the
// guides names a file or directory of the repository, and, with a
// #fragment, a heading of that Markdown file.
func TestDocLinks(t *testing.T) {
	checked := 0
	for _, file := range docFiles(t) {
		text, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(withoutCode(string(text)), -1) {
			target := m[1] + m[2]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path, fragment, _ := strings.Cut(target, "#")
			resolved := file
			if path != "" {
				if strings.HasPrefix(path, "/") {
					t.Errorf("%s: link %q: a link from the root of the site does not resolve on every host: make it relative", file, target)
					continue
				}
				resolved = filepath.ToSlash(filepath.Join(filepath.Dir(file), path))
				if _, err := os.Stat(filepath.Join(repoRoot, resolved)); err != nil {
					t.Errorf("%s: link %q: %s does not exist", file, target, resolved)
					continue
				}
			}
			if fragment != "" {
				if !strings.HasSuffix(resolved, ".md") {
					t.Errorf("%s: link %q: a #fragment of a file that is not Markdown", file, target)
				} else if anchors := headingAnchors(t, resolved); !anchors[fragment] {
					t.Errorf("%s: link %q: %s has no heading whose anchor is #%s", file, target, resolved, fragment)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found in the README and the guides")
	}
	t.Logf("%d relative links checked", checked)
}

// withoutCode returns text without its fenced blocks and code spans,
// whose brackets are not links.
func withoutCode(text string) string {
	return codeSpan.ReplaceAllString(withoutFences(text), "")
}

var codeSpan = regexp.MustCompile("`[^`]*`")

// headingAnchors returns the anchors that GitHub gives the headings of the
// Markdown file (from the repository's root): the heading's text in lower
// case, without its punctuation, spaces as hyphens, a repeated one
// numbered.
func headingAnchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	for line := range strings.Lines(withoutFences(string(text))) {
		heading, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "#")
		if !ok {
			continue
		}
		heading = strings.TrimLeft(heading, "#")
		if !strings.HasPrefix(heading, " ") {
			continue
		}
		var slug strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
				slug.WriteRune(r)
			}
		}
		a := slug.String()
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// withoutFences returns text without its fenced blocks, whose lines
// starting with # are not headings.
func withoutFences(text string) string {
	var out strings.Builder
	inFence := ""
	for line := range strings.Lines(text) {
		trimmed := strings.TrimSpace(line)
		if m := fence.FindStringSubmatch(line); m != nil {
			if inFence == "" {
				inFence = m[2]
				continue
			}
			if strings.HasPrefix(trimmed, inFence) && strings.Trim(trimmed, inFence[:1]) == "" {
				inFence = ""
				continue
			}
		}
		if inFence == "" {
			out.WriteString(line)
		}
	}
	return out.String()
}
