package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/spigot-go/spigot/store/memory"
)

// chromium returns the path of a Chromium to drive, or skips the test
// with one line (a failure under SPIGOT_REQUIRE_SERVERS=1, as in CI).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("SPIGOT_REQUIRE_SERVERS") == "1" {
		t.Fatal("chromium not found, and SPIGOT_REQUIRE_SERVERS=1: install Debian's chromium package")
	}
	t.Skip("chromium not found: the browser test of spigot demo skipped (apt-get install chromium)")
	return ""
}

// A browser is a headless Chromium on one page, that records the page's
// console errors and uncaught exceptions.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // as root, in CI
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	b := &browser{ctx: ctx}
	err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type != runtime.ConsoleAPICalledTypeError && ev.Type != runtime.ConsoleAPICalledTypeAssert {
				return
			}
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			msg = "console." + ev.Type.String() + ": " + strings.Join(args, " ")
		case *runtime.EventExceptionThrown:
			msg = "uncaught: " + ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				msg += " " + ev.ExceptionDetails.Exception.Description
			}
		default:
			return
		}
		b.mu.Lock()
		b.errors = append(b.errors, msg)
		b.mu.Unlock()
	})
	if err != nil {
		t.Fatalf("starting %s: %v", chromium(t), err)
	}
	return b
}

// do runs steps in the page, or fails the test saying what failed.
func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// text returns the text of the element with the id.
func (b *browser) text(t *testing.T, id string) string {
	t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.ID(id)))
	if err != nil {
		t.Fatalf("reading #%s: %v", id, err)
	}
	return s
}

// waitFor waits, on the page's state and not on time, until the
// JavaScript expression js is true.
func waitFor(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(60*time.Second))
}

// counts returns the page's admitted and denied counters.
func (b *browser) counts(t *testing.T) (admitted, denied string) {
	t.Helper()
	return b.text(t, "admitted"), b.text(t, "denied")
}

// TestDemoBrowser drives the demo page in a real headless Chromium: Burst
// ×10 on a fresh bucket of 10 that refills slowly admits 10 and denies
// none, and again denies 10; the worked example states its outcome; the
// page logs no error. It keeps screenshots at 1280×800 and 390×844 (the
// path is logged); with SPIGOT_DEMO_SCREENSHOT=file.png it also writes
// the wide one there, as the README's picture is made.
func TestDemoBrowser(t *testing.T) {
	srv := httptest.NewServer(newDemo(memory.New(), nil, "memory").handler())
	defer srv.Close()
	b := newBrowser(t)
	url := fmt.Sprintf("%s/?key=browser-%d", srv.URL, time.Now().UnixNano())

	b.do(t, "loading the page",
		chromedp.EmulateViewport(1280, 800),
		chromedp.Navigate(url),
		waitFor(`document.querySelectorAll("#slots .slot").length === 10`),
	)
	// Slow the refill, so that nothing comes back during the bursts.
	b.do(t, "setting the bucket to 10, 1 a minute",
		chromedp.SetValue(chromedp.ID("capacity"), "10"),
		chromedp.SetValue(chromedp.ID("rate"), "1/m"),
		chromedp.Click(chromedp.ID("apply")),
		waitFor(`document.getElementById("refill").textContent === "10 min"`),
	)
	b.do(t, "Burst ×10", chromedp.Click(chromedp.ID("burst")),
		waitFor(`Number(document.getElementById("admitted").textContent) + Number(document.getElementById("denied").textContent) === 10`))
	if a, d := b.counts(t); a != "10" || d != "0" {
		t.Errorf("the first Burst ×10 on a full bucket of 10: %s admitted, %s denied; want 10 and 0", a, d)
	}
	b.do(t, "Burst ×10 again", chromedp.Click(chromedp.ID("burst")),
		waitFor(`Number(document.getElementById("admitted").textContent) + Number(document.getElementById("denied").textContent) === 20`))
	if a, d := b.counts(t); a != "10" || d != "10" {
		t.Errorf("the second Burst ×10 on the emptied bucket: %s admitted, %s denied in all; want 10 and 10", a, d)
	}
	b.do(t, "the bucket drawn empty", waitFor(`document.getElementById("tokens").textContent === "0 / 10"`))

	b.do(t, "the worked example",
		chromedp.Click(chromedp.ID("scenario")),
		waitFor(`["as-predicted", "unexpected"].includes(document.getElementById("outcome").dataset.state)`),
	)
	outcome := b.text(t, "outcome")
	attr, err := chromedp.Run(b.ctx, chromedp.AttributeValue(chromedp.ID("outcome"), "data-state"))
	if err != nil {
		t.Fatal(err)
	}
	state := attr.Value
	const want = "15 at once: 10 admitted, 5 denied; then 5 of 5 requests at 1 a second admitted. As the model says."
	if outcome != want || state != "as-predicted" {
		t.Errorf("the worked example says %q (%s); want %q", outcome, state, want)
	}

	// For the pictures: a full bucket less one request of 3, the next
	// token filling (drawn once the page has polled the refill).
	b.do(t, "one request of 3 on a full bucket",
		chromedp.Click(chromedp.ID("reset")),
		waitFor(`document.getElementById("tokens").textContent === "10 / 10"`),
		chromedp.SetValue(chromedp.ID("cost"), "3"),
		chromedp.Click(chromedp.ID("one")),
		waitFor(`document.getElementById("tokens").textContent === "7 / 10" && document.querySelector(".slot.next") !== null`),
		waitFor(`(document.activeElement.blur(), window.scrollTo(0, 0), window.scrollY === 0)`),
	)

	dir := filepath.Join(os.TempDir(), "spigot-demo-screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, size := range []struct{ w, h int64 }{{1280, 800}, {390, 844}} {
		b.do(t, "resizing", chromedp.EmulateViewport(size.w, size.h), waitFor(`(window.scrollTo(0, 0), window.scrollY === 0)`))
		png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("a screenshot at %dx%d: %v", size.w, size.h, err)
		}
		file := filepath.Join(dir, fmt.Sprintf("demo-%dx%d.png", size.w, size.h))
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", file)
		if out := os.Getenv("SPIGOT_DEMO_SCREENSHOT"); out != "" && size.w == 1280 {
			if err := os.WriteFile(out, png, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("screenshot copied to %s", out)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		t.Errorf("the page logged an error: %s", e)
	}
}
