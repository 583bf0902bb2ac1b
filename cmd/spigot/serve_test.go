package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeCheck: spigot serve -check loads a configuration directory and
// says what it holds, or why it is refused (exit 1), naming the file; serve
// without -config is a usage error.
func TestServeCheck(t *testing.T) {
	good, bad := t.TempDir(), t.TempDir()
	write := func(dir, name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(good, "edge.yaml", "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
	write(bad, "edge.yaml", "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: fortnight, requests_per_unit: 10}\n")
	for _, c := range []struct {
		args       []string
		code       int
		out, inErr string
	}{
		{[]string{"serve", "-check", good}, 0, "the configuration loads: domains edge", ""},
		{[]string{"serve", "-check", bad}, 1, "", "edge.yaml"},
		{[]string{"serve"}, 2, "", "-config"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(c.args, &stdout, &stderr); code != c.code || !strings.Contains(stdout.String(), c.out) || !strings.Contains(stderr.String(), c.inErr) {
			t.Errorf("spigot %s: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q", strings.Join(c.args, " "), code, stdout.String(), stderr.String(), c.code, c.out, c.inErr)
		}
	}
}
