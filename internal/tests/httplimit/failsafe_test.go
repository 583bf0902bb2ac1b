package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
	spigotredis "github.com/spigot-go/spigot/store/redis"
)

// TestMain turns off go-redis's logging and says how many tests were
// skipped for want of a server binary.
func TestMain(m *testing.M) { testclient.Main(m) }

// TestWrongTypeFailsClosed: on a real redis-server, a key that holds
// another Redis type is an error about that request, which store/hybrid
// returns whatever its policy: the middleware must not serve it.
func TestWrongTypeFailsClosed(t *testing.T) {
	srv := testserver.Start(t, testserver.Redis)
	login := spigot.MustBucket("login", 5, spigot.PerMinute(1))
	const prefix = "wrongtype:"
	if _, err := srv.Do("RPUSH", store.Key(prefix, login, "192.0.2.1"), "x"); err != nil {
		t.Fatal(err)
	}
	remote := spigotredis.New(testclient.GoRedis(t, srv.Addr), store.WithPrefix(prefix))
	for _, policy := range []hybrid.Policy{hybrid.Local, hybrid.FailOpen, hybrid.FailClosed} {
		s := hybrid.New(remote, memory.New(), hybrid.WithPolicy(policy), hybrid.WithTimeout(10*time.Second))
		var served atomic.Int64
		next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			served.Add(1)
			w.WriteHeader(http.StatusNoContent)
		})
		h := httplimit.New(s, httplimit.By(login, nil)).Wrap(next)
		for i := range 10 {
			w := httptest.NewRecorder()
			r := httptest.NewRequest("POST", "/login", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			h.ServeHTTP(w, r)
			if w.Code != http.StatusServiceUnavailable {
				t.Errorf("%v: step %d: got %d; want 503", policy, i, w.Code)
			}
		}
		if n := served.Load(); n != 0 {
			t.Errorf("%v: served %d of 10 requests on a key that holds a list; want none", policy, n)
		}
	}
}
