package bench

import (
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// A Progress shows a run's progress, cell by cell. Its methods are safe
// for concurrent use.
type Progress interface {
	// Start says that the cell described by cell (as by CellLabel) is
	// now running.
	Start(cell string)
	// Done says that one more cell has finished.
	Done()
	// Finish says that the run is over, complete or not: the bar is
	// erased, so that what is written next starts on a clean line.
	// Start and Done do nothing after it; a second Finish does nothing.
	Finish()
}

// CellLabel returns the description of a cell that Progress shows:
// "redis c=64 keys=1000".
func CellLabel(store string, concurrency, keys int) string {
	return store + " c=" + strconv.Itoa(concurrency) + " keys=" + strconv.Itoa(keys)
}

// NewProgress returns a Progress for a run of total cells. When w is an
// *os.File open on a terminal, it draws on w a bar of the cells done
// out of total, with the running cell's description and the time
// elapsed, redrawn every half second; otherwise (a pipe, a file, a
// bytes.Buffer), or when total is not positive, it writes nothing.
func NewProgress(w io.Writer, total int) Progress {
	f, ok := w.(*os.File)
	if !ok || total <= 0 || !term.IsTerminal(int(f.Fd())) {
		return quiet{}
	}
	return newBar(w, total, 500*time.Millisecond)
}

// quiet is the Progress that writes nothing.
type quiet struct{}

func (quiet) Start(string) {}
func (quiet) Done()        {}
func (quiet) Finish()      {}

// bar is the Progress of a terminal: a progressbar redrawn every tick
// while it runs, so that the time elapsed moves during a long cell.
type bar struct {
	bar  *progressbar.ProgressBar
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
	mu   sync.Mutex // held by Start, Done and Finish
	done bool       // Finish ran
}

func newBar(w io.Writer, total int, tick time.Duration) *bar {
	b := &bar{
		bar: progressbar.NewOptions(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetPredictTime(false), // its guess from so few steps misleads
			progressbar.OptionClearOnFinish(),
			progressbar.OptionSetRenderBlankState(true),
		),
		stop: make(chan struct{}),
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-b.stop:
				return
			case <-t.C:
				_ = b.bar.RenderBlank() // redraws the current state
			}
		}
	}()
	return b
}

func (b *bar) Start(cell string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		b.bar.Describe(cell)
	}
}

func (b *bar) Done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		_ = b.bar.Add(1) // errs only past total, which it ignores
	}
}

func (b *bar) Finish() {
	b.once.Do(func() {
		close(b.stop)
		b.wg.Wait()
		b.mu.Lock()
		defer b.mu.Unlock()
		b.done = true
		_ = b.bar.Clear()
		_ = b.bar.Exit()
	})
}
