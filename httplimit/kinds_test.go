package httplimit_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/httplimit"
)

// kindStep is one request of TestHeadersKinds: the clock advanced by
// after, the status, RateLimit's r and t, X-RateLimit-Reset and
// Retry-After (0: none).
type kindStep struct {
	after              time.Duration
	status             int
	r, t, reset, retry int
}

// TestHeadersKinds: the headers of each kind of limit at fixed instants:
// q and w are a window's capacity and length, a leaky bucket's capacity
// and the time its queue takes to drain; r is what a request may take now, t the
// seconds within which no more is admitted, and X-RateLimit-Reset the
// seconds until the limit is whole again. A denial's Retry-After is never
// below t.
func TestHeadersKinds(t *testing.T) {
	// t0 is a whole minute since the epoch: windows start there.
	for _, tt := range []struct {
		limit  spigot.Limit
		policy string
		steps  []kindStep
	}{
		{spigot.Must(spigot.NewFixedWindow("fw", spigot.PerMinute(2), 0)), `"fw";q=2;w=60`, []kindStep{
			{10 * time.Second, 204, 1, 50, 50, 0},
			{0, 204, 0, 50, 50, 0},
			{20 * time.Second, 429, 0, 30, 30, 30},
			{30 * time.Second, 204, 1, 60, 60, 0}, // the next window
		}},
		{spigot.Must(spigot.NewFixedWindow("fw5", spigot.PerMinute(2), 5*time.Second)), `"fw5";q=2;w=60`, []kindStep{
			{0, 204, 1, 5, 5, 0}, // windows start 5 s past each minute
			{0, 204, 0, 5, 5, 0},
			{5 * time.Second, 204, 1, 60, 60, 0},
		}},
		{spigot.Must(spigot.NewSlidingWindow("sw", spigot.PerMinute(2))), `"sw";q=2;w=60`, []kindStep{
			// Were r taken now, 2 would count in this window, and 1
			// more fit 30 s into the next.
			{30 * time.Second, 204, 1, 60, 90, 0},
			{0, 204, 0, 60, 90, 0},
			// The next window, 15 s in: 2 × 45/60 = 1.5 of the previous
			// one's still count, and 1 fits once they are 1: at 30 s in.
			{45 * time.Second, 429, 0, 15, 45, 15},
			// 1 of the previous window's and this one count until the
			// next window, where 1 more fits.
			{15 * time.Second, 204, 0, 30, 90, 0},
		}},
		{spigot.Must(spigot.NewSlidingLog("sl", spigot.PerMinute(2))), `"sl";q=2;w=60`, []kindStep{
			{0, 204, 1, 60, 60, 0}, // were r taken now, the log's oldest leaves in 60 s
			{40 * time.Second, 204, 0, 20, 60, 0},
			{10 * time.Second, 429, 0, 10, 50, 10},
			{10 * time.Second, 204, 0, 40, 60, 0},
		}},
		{spigot.Must(spigot.NewLeakyBucket("lb", 3, spigot.PerSecond(1))), `"lb";q=3;w=3`, []kindStep{
			{0, 204, 2, 1, 1, 0}, // an empty queue: served at once
		}},
		{spigot.MustBucket("tb", 3, spigot.PerMinute(3)), `"tb";q=3;w=60`, []kindStep{
			{0, 204, 2, 20, 20, 0},
			{0, 204, 1, 20, 40, 0},
			{5 * time.Second, 204, 0, 15, 55, 0},
			{0, 429, 0, 15, 55, 15},
			{15 * time.Second, 204, 0, 20, 60, 0},
		}},
	} {
		t.Run(tt.limit.String(), func(t *testing.T) {
			c, s := fixture()
			h := httplimit.New(s, httplimit.By(tt.limit, nil), httplimit.WithClock(c)).Wrap(&served{})
			var steps []step
			for _, st := range tt.steps {
				want := map[string]string{
					"Ratelimit-Policy":      tt.policy,
					"Ratelimit":             fmt.Sprintf(`%q;r=%d;t=%d`, tt.limit.Name(), st.r, st.t),
					"X-Ratelimit-Limit":     strconv.FormatInt(tt.limit.Capacity(), 10),
					"X-Ratelimit-Remaining": strconv.Itoa(st.r),
					"X-Ratelimit-Reset":     strconv.Itoa(st.reset),
				}
				if st.retry > 0 {
					want["Retry-After"] = strconv.Itoa(st.retry)
					if st.retry < st.t {
						t.Fatalf("the table's Retry-After %d is below its t %d", st.retry, st.t)
					}
				}
				steps = append(steps, step{after: st.after, status: st.status, want: want})
			}
			play(t, c, h, steps)
		})
	}
}

// TestShaperHoldsRequests: a request that a leaky bucket admits with a
// Delay is served at its turn, on the middleware's clock, and one whose
// client goes away first is refunded and not served.
func TestShaperHoldsRequests(t *testing.T) {
	c, s := fixture()
	shaper := spigot.Must(spigot.NewLeakyBucket("lb", 3, spigot.PerSecond(1)))
	next := &served{}
	h := httplimit.New(s, httplimit.By(shaper, nil), httplimit.WithClock(c)).Wrap(next)
	send := func(ctx context.Context) <-chan int {
		done := make(chan int, 1)
		go func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
			done <- w.Code
		}()
		return done
	}
	if code := <-send(context.Background()); code != 204 || next.n.Load() != 1 {
		t.Fatalf("step 1: got %d, %d served; want 204 at once", code, next.n.Load())
	}
	second := send(context.Background())
	c.BlockUntil(1)
	c.Advance(999 * time.Millisecond)
	if n := next.n.Load(); n != 1 {
		t.Fatalf("step 2: %d served before the second request's turn; want 1", n)
	}
	c.Advance(time.Millisecond)
	if code := <-second; code != 204 || next.n.Load() != 2 {
		t.Fatalf("step 2: got %d, %d served; want 204 at its turn", code, next.n.Load())
	}

	ctx, cancel := context.WithCancel(context.Background())
	third := send(ctx) // its turn is 1 s away
	c.BlockUntil(1)
	cancel()
	<-third
	if n := next.n.Load(); n != 2 {
		t.Errorf("step 3: a request whose client went away was served (%d served; want 2)", n)
	}
	d, err := s.Do(context.Background(), spigot.Op{Limit: shaper, Key: "192.0.2.1", Action: spigot.Peek, N: 1})
	if err != nil || d.Remaining != 2 || d.Delay != time.Second {
		t.Errorf("step 3: Peek = %+v, %v; want the abandoned turn refunded (Remaining 2, Delay 1s)", d, err)
	}
}
