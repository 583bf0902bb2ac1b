package store_test

// The stored format of each release is frozen in a golden file that every
// later release reads: testdata/format-v0.1.0.txt is v0.1.0's.

import (
	"bufio"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
)

// formatV010 is the golden file of v0.1.0's stored format.
const formatV010 = "testdata/format-v0.1.0.txt"

// A formatStep is one step of a golden file of the stored format: an op
// at an instant, its decision, and the value the key holds after it.
type formatStep struct {
	line  int // in the file
	op    spigot.Op
	at    time.Time
	want  spigot.Decision
	value string // "" for no key
}

// readFormat returns the steps of the golden file at path, one sequence
// a limit line, each from a key with no value (the file's header says
// how it is written).
func readFormat(t testing.TB, path string) [][]formatStep {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var seqs [][]formatStep
	var l spigot.Limit
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		bad := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("%s:%d: %s: %q", path, n, fmt.Sprintf(format, args...), line)
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "limit "); ok {
			if l, err = parseFormatLimit(rest); err != nil {
				bad("%v", err)
			}
			seqs = append(seqs, nil)
			continue
		}
		head, value, ok := strings.Cut(line, " : ")
		op, decision, ok2 := strings.Cut(head, " => ")
		o, d := strings.Fields(op), strings.Fields(decision)
		if !ok || !ok2 || len(o) != 3 || len(d) != 6 || seqs == nil {
			bad("want \"<µs> <action> <n> => <n> <remaining> <retry> <reset> <refill> <delay> : <value>\" after a limit line")
		}
		var x [8]int64
		for i, s := range append([]string{o[0], o[2]}, d...) {
			if x[i], err = strconv.ParseInt(s, 10, 64); err != nil {
				bad("%v", err)
			}
		}
		a := slices.IndexFunc(allActions, func(a spigot.Action) bool { return strings.ToLower(a.String()) == o[1] })
		if a < 0 {
			bad("no action %q", o[1])
		}
		if value == "-" {
			value = ""
		}
		ms := func(x int64) time.Duration {
			if x == -1 {
				return spigot.Never
			}
			return time.Duration(x) * time.Millisecond
		}
		delay := time.Duration(x[7]) * time.Microsecond
		if x[7] == -1 {
			delay = spigot.Never
		}
		seqs[len(seqs)-1] = append(seqs[len(seqs)-1], formatStep{
			line:  n,
			op:    spigot.Op{Limit: l, Key: "golden", Action: allActions[a], N: x[1]},
			at:    time.UnixMicro(x[0]).UTC(),
			want:  spigot.Decision{N: x[2], Remaining: x[3], RetryAfter: ms(x[4]), ResetAfter: ms(x[5]), RefillAfter: ms(x[6]), Delay: delay},
			value: value,
		})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return seqs
}

// parseFormatLimit returns the limit of a golden file's limit line:
// "<kind> <capacity> <tokens>/<period>" for a bucket, "<kind>
// <tokens>/<period> [<offset>]" for a window or a log, the kind by its
// name (spigot.Kind's String), durations as time.ParseDuration reads them.
func parseFormatLimit(s string) (spigot.Limit, error) {
	f := strings.Fields(s)
	k := slices.IndexFunc(allKinds, func(k spigot.Kind) bool { return len(f) > 0 && k.String() == f[0] })
	if k < 0 || len(f) < 2 {
		return spigot.Limit{}, fmt.Errorf("want a kind and its parameters")
	}
	kind, f := allKinds[k], f[1:]
	var capacity int64
	if kind == spigot.TokenBucket || kind == spigot.LeakyBucket {
		c, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || len(f) != 2 {
			return spigot.Limit{}, fmt.Errorf("want the capacity and the rate of a bucket")
		}
		capacity, f = c, f[1:]
	}
	tokens, period, ok := strings.Cut(f[0], "/")
	n, err := strconv.ParseInt(tokens, 10, 64)
	p, perr := time.ParseDuration(period)
	if !ok || err != nil || perr != nil {
		return spigot.Limit{}, fmt.Errorf("want a rate <tokens>/<period>")
	}
	rate, offset := spigot.Per(n, p), time.Duration(0)
	if len(f) == 2 && kind == spigot.FixedWindow {
		if offset, err = time.ParseDuration(f[1]); err != nil {
			return spigot.Limit{}, err
		}
	} else if len(f) != 1 {
		return spigot.Limit{}, fmt.Errorf("too many parameters")
	}
	switch kind {
	case spigot.TokenBucket:
		return spigot.NewBucket("golden", capacity, rate)
	case spigot.LeakyBucket:
		return spigot.NewLeakyBucket("golden", capacity, rate)
	case spigot.FixedWindow:
		return spigot.NewFixedWindow("golden", rate, offset)
	case spigot.SlidingWindow:
		return spigot.NewSlidingWindow("golden", rate)
	}
	return spigot.NewSlidingLog("golden", rate)
}

// testFormatV010: on the server, at the instants of the caller's clock
// that testdata/format-v0.1.0.txt gives, the script decides each step as
// the file says and leaves exactly the value the file holds after it, on
// a key that starts with no value; and on a key set to the value the file
// holds before a step (none for the first), it decides that step as the
// file says too. A later release keeps the second half: it reads v0.1.0's
// values to the same decisions (though it may write a later version),
// and checks its own writing against a golden file of its own.
func testFormatV010(t *testing.T, ps protoStore, srv *testserver.Server) {
	clk := clocktest.New(t0)
	p := prefix(t)
	s := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: p})
	raw := testclient.GoRedis(t, srv.Addr)
	for i, seq := range readFormat(t, formatV010) {
		for j, st := range seq {
			clk.Set(st.at)
			// What the script writes, from no key.
			op := st.op
			op.Key = fmt.Sprintf("w%d", i)
			key := store.Key(p, op.Limit, op.Key)
			if problem := diffDecisions(do(t, s, op), st.want); problem != "" {
				t.Errorf("%s:%d: %v on the sequence so far: %s", formatV010, st.line, op, problem)
			}
			if v, _ := getValue(t, raw, key); v != st.value {
				t.Errorf("%s:%d: %v: the script left %q; the file holds %q", formatV010, st.line, op, v, st.value)
			}
			// What the script reads: the value before this step, set.
			op.Key = fmt.Sprintf("r%d-%d", i, j)
			key = store.Key(p, op.Limit, op.Key)
			if j > 0 && seq[j-1].value != "" {
				mustDo(t, srv, "SET", key, seq[j-1].value)
			}
			if problem := diffDecisions(do(t, s, op), st.want); problem != "" {
				t.Errorf("%s:%d: %v on the value before it: %s", formatV010, st.line, op, problem)
			}
			if v, _ := getValue(t, raw, key); v != st.value {
				t.Errorf("%s:%d: %v on the value before it: the script left %q; the file holds %q", formatV010, st.line, op, v, st.value)
			}
		}
	}
}

// TestFormatV010Model: spigot's Go model reads the values of
// testdata/format-v0.1.0.txt (wire.ParseState) to the decisions the file
// gives, and leaves the state the value after each step stands for; the
// file holds every kind and every action.
func TestFormatV010Model(t *testing.T) {
	kinds, actions := map[spigot.Kind]bool{}, map[spigot.Action]bool{}
	for _, seq := range readFormat(t, formatV010) {
		var before store.State
		for _, st := range seq {
			after, d := apply(st.op, before, st.at)
			if problem := diffDecisions(d, st.want); problem != "" {
				t.Errorf("%s:%d: %v: Op.Apply: %s", formatV010, st.line, st.op, problem)
			}
			var want store.State
			if st.value != "" {
				var err error
				if want, err = wire.ParseState(st.value, st.op.Limit.Kind()); err != nil {
					t.Fatalf("%s:%d: ParseState(%q): %v", formatV010, st.line, st.value, err)
				}
			}
			if !reflect.DeepEqual(after, want) {
				t.Errorf("%s:%d: %v: Op.Apply leaves %+v; the file's value stands for %+v", formatV010, st.line, st.op, after, want)
			}
			before = want
			kinds[st.op.Limit.Kind()], actions[st.op.Action] = true, true
		}
	}
	for _, k := range allKinds {
		if !kinds[k] {
			t.Errorf("%s has no step of a %v", formatV010, k)
		}
	}
	for _, a := range allActions {
		if !actions[a] {
			t.Errorf("%s has no %v", formatV010, a)
		}
	}
}
