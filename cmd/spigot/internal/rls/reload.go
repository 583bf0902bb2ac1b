package rls

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"strconv"
	"time"
)

// A WatchOption configures Watch.
type WatchOption func(*watcher)

// WithInterval sets how often Watch reads the directory: every second by
// default.
func WithInterval(d time.Duration) WatchOption {
	if d <= 0 {
		panic("rls: WithInterval: interval " + d.String() + " is not above 0")
	}
	return func(w *watcher) { w.interval = d }
}

// withTicks makes Watch read the directory at each receive from c, and
// send to done after each reading, for tests.
func withTicks(c <-chan time.Time, done chan<- struct{}) WatchOption {
	return func(w *watcher) { w.ticks, w.done = c, done }
}

type watcher struct {
	interval time.Duration
	ticks    <-chan time.Time
	done     chan<- struct{}
}

// Watch loads dir as LoadDir does and calls f with the result, then reads
// the directory again at every interval and, each time the names or the
// contents of its config files differ from the last reading, loads it
// again and calls f: with the new config, or with nil and the error that
// refused it (a file that does not parse, a duplicate domain), so that the
// caller keeps the config it has. A config that stays bad is reported
// once. It returns when ctx is done. f is called from Watch's goroutine,
// one call at a time.
//
// A change is noticed by reading the files, not from their modification
// times or from file system events: a ConfigMap's symbolic links swapped
// at once, a file rewritten within one tick of the file system's clock,
// a directory on a network file system are all seen, at the cost of
// reading a directory of small files once an interval. A file read while
// it is being written may be refused, and is read again at the next
// interval: write a new file beside the old and rename it over the old to
// have none refused.
func Watch(ctx context.Context, dir string, f func(*Config, error), opts ...WatchOption) {
	w := &watcher{interval: time.Second}
	for _, o := range opts {
		o(w)
	}
	if w.ticks == nil {
		t := time.NewTicker(w.interval)
		defer t.Stop()
		w.ticks = t.C
	}
	var last []byte
	scan := func() {
		sum, files, err := fingerprint(dir)
		if err == nil && last != nil && bytes.Equal(sum, last) {
			return
		}
		if err != nil {
			if last != nil && bytes.Equal(last, []byte("error")) {
				return
			}
			last = []byte("error")
			f(nil, err)
			return
		}
		last = sum
		cfg, err := load(files)
		if err != nil {
			f(nil, err)
			return
		}
		f(cfg, nil)
	}
	for {
		scan()
		if w.done != nil {
			w.done <- struct{}{}
		}
		select {
		case <-ctx.Done():
			return
		case <-w.ticks:
		}
	}
}

type file struct {
	name string
	data []byte
}

// fingerprint reads dir's config files, and returns a hash of their names
// and contents.
func fingerprint(dir string) ([]byte, []file, error) {
	files, err := readFiles(os.DirFS(dir)) // in the order of their names
	if err != nil {
		return nil, nil, err
	}
	h := sha256.New()
	for _, fl := range files {
		h.Write([]byte(strconv.Itoa(len(fl.name)) + ":" + fl.name + strconv.Itoa(len(fl.data)) + ":"))
		h.Write(fl.data)
	}
	return h.Sum(nil), files, nil
}

// load makes a Config of files, in their order.
func load(files []file) (*Config, error) {
	c := &Config{domains: map[string]*domain{}}
	for _, fl := range files {
		if err := c.add(fl.name, fl.data); err != nil {
			return nil, err
		}
	}
	return c, nil
}
