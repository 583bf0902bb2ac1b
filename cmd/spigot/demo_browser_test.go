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

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/clock/clocktest"
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
		case *log.EventEntryAdded: // what the browser itself logs, such as a resource that failed to load
			if ev.Entry.Level != log.EntryLevelError || denial(ev.Entry.URL, ev.Entry.Text) {
				return
			}
			msg = "log." + ev.Entry.Source.String() + ": " + ev.Entry.Text + " " + ev.Entry.URL
		case *network.EventResponseReceived:
			if ev.Response.Status < 400 || ev.Response.URL == "" {
				return
			}
			if denial(ev.Response.URL, fmt.Sprintf("status of %d", ev.Response.Status)) {
				return
			}
			msg = fmt.Sprintf("HTTP %d: %s", ev.Response.Status, ev.Response.URL)
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

// denial reports whether a failed load is a 429 of the demo's API: a
// denial, which is what the page shows, not an error of the page.
func denial(url, text string) bool {
	return strings.Contains(url, "/api/request") && strings.Contains(text, "status of 429")
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
// none, and again denies 10; the worked example draws its burst as one
// bar of admitted and denied parts, and states its outcome where a
// 1280×900 window shows it without scrolling; the page logs no error and
// loads nothing that fails (its icon included). It keeps screenshots at 1280×800 and 390×844 (the
// path is logged); with SPIGOT_DEMO_SCREENSHOT=file.png it also writes
// the wide one there, as the README's picture is made.
func TestDemoBrowser(t *testing.T) {
	srv := httptest.NewServer(newDemo(memory.New(), nil, "memory", clock.System()).handler())
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

	// The worked example, at 1280×900: its burst of 15 is one bar in the
	// strip, 10 admitted below 5 denied, each part drawn; its result is
	// in view without scrolling.
	b.do(t, "the worked example",
		chromedp.EmulateViewport(1280, 900),
		waitFor(`(window.scrollTo(0, 0), window.scrollY === 0)`),
		chromedp.Click(chromedp.ID("scenario")),
		waitFor(`document.getElementById("outcome").textContent.startsWith("15 at once: 10 admitted, 5 denied.")`),
	)
	b.do(t, "the burst of 15 drawn as one bar of 10 admitted and 5 denied", waitFor(`(() => {
		const bars = document.querySelectorAll("#strip .burst");
		const bar = bars[bars.length - 1];
		if (!bar || bar.dataset.admitted !== "10" || bar.dataset.denied !== "5") return false;
		const ok = bar.querySelector("i.ok").getBoundingClientRect();
		const no = bar.querySelector("i.no").getBoundingClientRect();
		return ok.height >= 3 && no.height >= 3 && ok.height > no.height && no.bottom <= ok.top + 0.5 &&
			ok.width > 0 && no.width > 0 && bar.querySelector("b").textContent === "10 / 5";
	})()`))
	b.do(t, "the worked example's result",
		waitFor(`["as-predicted", "unexpected"].includes(document.getElementById("outcome").dataset.state)`),
		waitFor(`(window.scrollTo(0, 0), window.scrollY === 0)`),
	)
	inView, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`(() => {
		const r = document.getElementById("outcome").getBoundingClientRect();
		return window.innerWidth === 1280 && window.innerHeight === 900 && r.height > 0 && r.top >= 0 && r.left >= 0 && r.bottom <= window.innerHeight && r.right <= window.innerWidth;
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if !inView {
		box, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`JSON.stringify(document.getElementById("outcome").getBoundingClientRect())`))
		t.Errorf("the worked example's result is at %s: not in view at 1280×900 without scrolling", box)
	}
	b.screenshot(t, "demo-example-1280x900.png")
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

// choose selects the algorithm name on the page, as a person does.
func (b *browser) choose(t *testing.T, name string) {
	t.Helper()
	b.do(t, "choosing "+name, chromedp.SetValue(chromedp.ID("algo"), name))
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.getElementById("algo").dispatchEvent(new Event("change"))`)); err != nil {
		t.Fatalf("choosing %s: %v", name, err)
	}
}

// TestDemoBrowserAlgorithms drives each algorithm on the page, then all
// five side by side, on a demo whose store runs on a fake clock: Burst
// ×10 10ms before a second ends, the clock moved 20ms, Burst ×10 again.
// With a capacity of 10 at 10/s (windows of 10 in 1s), the page shows
// what the model says: the fixed window admits all 20 across its
// boundary; the others admit 10 and deny 10; the leaky bucket gives its
// 10 the turns 0 ms to 900 ms; the sliding log lists its entries.
func TestDemoBrowserAlgorithms(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 990*int(time.Millisecond), time.UTC)
	clk := clocktest.New(base)
	srv := httptest.NewServer(newDemo(memory.New(memory.WithClock(clk)), nil, "memory", clk).handler())
	defer srv.Close()
	b := newBrowser(t)
	b.do(t, "loading the page and setting 10 at 10/s",
		chromedp.EmulateViewport(1280, 800),
		chromedp.Navigate(fmt.Sprintf("%s/?key=algorithms-%d", srv.URL, time.Now().UnixNano())),
		waitFor(`document.querySelectorAll("#slots .slot").length === 10`),
		chromedp.SetValue(chromedp.ID("capacity"), "10"),
		chromedp.SetValue(chromedp.ID("rate"), "10/s"),
		chromedp.Click(chromedp.ID("apply")),
		waitFor(`document.getElementById("refill").textContent === "1 s"`),
	)
	// processed is the page's count of answers for the algorithm: its
	// counters, or its row of the table.
	processed := func(name string) string {
		if name == "all" {
			return `[...document.querySelectorAll("#algos tbody tr")].every(r => Number(r.querySelector(".admitted").textContent) + Number(r.querySelector(".denied").textContent) === %d)`
		}
		return `Number(document.getElementById("admitted").textContent) + Number(document.getElementById("denied").textContent) === %d`
	}
	want := map[string][2]string{
		"token-bucket":   {"10", "10"},
		"fixed-window":   {"20", "0"},
		"sliding-window": {"10", "10"},
		"sliding-log":    {"10", "10"},
		"leaky-bucket":   {"10", "10"},
	}
	// boundary plays the two bursts across the boundary of the second
	// after start.
	boundary := func(name string, start time.Time) {
		t.Helper()
		clk.Set(start)
		b.do(t, name+": starting again", chromedp.Click(chromedp.ID("reset")),
			waitFor(fmt.Sprintf(processed(name), 0)),
			waitFor(`[...document.querySelectorAll("#algos .room")].every(td => td.textContent === "10 / 10")`))
		b.do(t, name+": Burst ×10 10ms before the second ends", chromedp.Click(chromedp.ID("burst")), waitFor(fmt.Sprintf(processed(name), 10)))
		clk.Advance(20 * time.Millisecond)
		b.do(t, name+": Burst ×10 10ms after", chromedp.Click(chromedp.ID("burst")), waitFor(fmt.Sprintf(processed(name), 20)))
	}
	for i, a := range algorithms {
		b.choose(t, a.name)
		boundary(a.name, base.Add(time.Duration(i)*time.Second))
		if admitted, denied := b.counts(t); admitted != want[a.name][0] || denied != want[a.name][1] {
			t.Errorf("step %d: %s: the page shows %s admitted, %s denied; want %s and %s", i, a.name, admitted, denied, want[a.name][0], want[a.name][1])
		}
		switch a.name {
		case "leaky-bucket":
			const turns = "Turns given: 0 ms, 100 ms, 200 ms, 300 ms, 400 ms, 500 ms, 600 ms, 700 ms, 800 ms, 900 ms"
			if got := b.text(t, "turns"); got != turns {
				t.Errorf("step %d: leaky-bucket: the page shows %q, want %q", i, got, turns)
			}
		case "fixed-window":
			b.do(t, "the fixed window's state", waitFor(`document.getElementById("detail").textContent === "10 of 10 taken in this window of 1 s; the next starts in 990 ms"`))
		case "sliding-log":
			b.do(t, "the sliding log's entries", waitFor(`document.getElementById("detail").textContent.endsWith("the oldest leaves in 980 ms. Entries leave in 980 ms ×10")`))
		}
		b.screenshot(t, "demo-"+a.name+"-1280x800.png")
	}

	b.choose(t, "all")
	boundary("all", base.Add(time.Duration(len(algorithms))*time.Second))
	for i, a := range algorithms {
		row := "#row-" + a.name
		admitted, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(row+" .admitted")))
		if err != nil {
			t.Fatal(err)
		}
		denied, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(row+" .denied")))
		if err != nil {
			t.Fatal(err)
		}
		if admitted != want[a.name][0] || denied != want[a.name][1] {
			t.Errorf("step %d: all five: %s's row shows %s admitted, %s denied; want %s and %s", i, a.name, admitted, denied, want[a.name][0], want[a.name][1])
		}
	}
	waits, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS("#row-leaky-bucket .waits")))
	if err != nil {
		t.Fatal(err)
	}
	if want := "0 ms, 100 ms, 200 ms, 300 ms, 400 ms, 500 ms, 600 ms, 700 ms, 800 ms, 900 ms"; waits != want {
		t.Errorf("all five: the leaky bucket waits %q, want %q", waits, want)
	}

	b.screenshot(t, "demo-all-1280x800.png")
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		t.Errorf("the page logged an error: %s", e)
	}
}

// screenshot keeps a picture of the page in the screenshots' directory,
// and logs its path.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(os.TempDir(), "spigot-demo-screenshots", name)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", file)
}
