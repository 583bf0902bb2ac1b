package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// A program is a Go program of the README or a guide: a fenced go block
// that starts with package main.
type program struct {
	name   string // the rehearsal's name for it, a directory: quickstart, grpc, redis1
	file   string // from the repository's root
	line   int    // of its fence, from 1
	mark   string // the <!-- go: … --> line just before its fence, without its delimiters
	code   string
	output string // what its // Output: comment says it prints, or ""
}

func (p program) String() string { return fmt.Sprintf("%s:%d", p.file, p.line) }

var docMark = regexp.MustCompile(`^<!-- go: (.+) -->$`)

// programs returns the programs of the Markdown file (from root).
func programs(root, file string) ([]program, error) {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
	if err != nil {
		return nil, err
	}
	var progs []program
	var open *program
	var code strings.Builder
	prev := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case open != nil && line == "```":
			open.code = code.String()
			if strings.HasPrefix(open.code, "package main\n") {
				if _, out, ok := strings.Cut(open.code, "\t// Output:\n"); ok {
					for l := range strings.Lines(out) {
						text, ok := strings.CutPrefix(strings.TrimSpace(l), "//")
						if !ok {
							break
						}
						open.output += strings.TrimPrefix(text, " ") + "\n"
					}
				}
				progs = append(progs, *open)
			}
			open = nil
		case open != nil:
			code.WriteString(line + "\n")
		case line == "```go":
			open = &program{file: file, line: n}
			if m := docMark.FindStringSubmatch(prev); m != nil {
				open.mark = m[1]
			}
			code.Reset()
		}
		prev = line
	}
	if open != nil {
		return nil, fmt.Errorf("%v: a go block left open", *open)
	}
	return progs, sc.Err()
}

// rehearsed returns the programs that the rehearsal builds and runs: the
// README's quickstart (marked <!-- go: quickstart -->), the gRPC guide's
// program of grpclimit.New with an // Output: comment, and every program of
// the guides marked <!-- go: run with redis -->, which runs with the
// address of a Redis server in REDIS_ADDR.
func rehearsed(root string) ([]program, error) {
	guides, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	files := []string{"README.md"}
	for _, g := range guides {
		files = append(files, "docs/"+filepath.Base(g))
	}
	var quickstart, grpc, redis []program
	for _, f := range files {
		progs, err := programs(root, f)
		if err != nil {
			return nil, err
		}
		for _, p := range progs {
			switch {
			case f == "README.md" && p.mark == "quickstart":
				p.name = "quickstart"
				quickstart = append(quickstart, p)
			case f == "docs/grpc.md" && p.output != "" && strings.Contains(p.code, "grpclimit.New("):
				p.name = "grpc"
				grpc = append(grpc, p)
			case p.mark == "run with redis":
				p.name = fmt.Sprintf("redis%d", len(redis)+1)
				redis = append(redis, p)
			}
		}
	}
	if len(quickstart) != 1 || len(grpc) == 0 || len(redis) == 0 {
		return nil, fmt.Errorf("the docs have %d quickstarts (README.md, <!-- go: quickstart -->), %d programs of grpclimit.New with an // Output: comment (docs/grpc.md) and %d programs marked <!-- go: run with redis -->: want 1, 1 or more, 1 or more",
			len(quickstart), len(grpc), len(redis))
	}
	return append(append(quickstart, grpc[0]), redis...), nil
}

// installCommands returns the go get and go install commands of the
// README's install block (the first fenced block under "## Install"), each
// as its words without the comment after it.
func installCommands(root string) (gets, installs [][]string, err error) {
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return nil, nil, err
	}
	_, section, ok := strings.Cut(string(data), "\n## Install\n")
	if !ok {
		return nil, nil, fmt.Errorf("README.md: no ## Install section")
	}
	_, block, ok := strings.Cut(section, "\n```\n")
	if !ok {
		return nil, nil, fmt.Errorf("README.md: no block under ## Install")
	}
	block, _, _ = strings.Cut(block, "\n```\n")
	for line := range strings.Lines(block) {
		line, _, _ = strings.Cut(line, "#")
		words := strings.Fields(line)
		switch {
		case len(words) == 3 && words[0] == "go" && words[1] == "get":
			gets = append(gets, words)
		case len(words) == 3 && words[0] == "go" && words[1] == "install":
			installs = append(installs, words)
		}
	}
	return gets, installs, nil
}
