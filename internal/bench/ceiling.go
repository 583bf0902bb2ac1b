package bench

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
)

// A CeilingSpec is one run of redis-benchmark: its connections (-c),
// threads (--threads, 1 for none), requests per round trip (-P) and
// requests in all (-n).
type CeilingSpec struct {
	Concurrency, Threads, Pipeline int
	Requests                       int64
}

// CeilingPlan returns the runs, in order, of the search for the ceiling
// at pipeline depth pipeline on a client machine of cpus CPUs: 50
// connections from one thread (redis-benchmark's default), then from
// min(cpus, 4) threads, then 200 connections from those threads (from
// one thread on one CPU). A run that saturates the server ends the
// search; the best run is the ceiling. Requests is left 0, for the
// caller to size.
func CeilingPlan(pipeline, cpus int) []CeilingSpec {
	threads := max(1, min(cpus, 4))
	plan := []CeilingSpec{{Concurrency: 50, Threads: 1, Pipeline: pipeline}}
	if threads > 1 {
		plan = append(plan, CeilingSpec{Concurrency: 50, Threads: threads, Pipeline: pipeline})
	}
	return append(plan, CeilingSpec{Concurrency: 200, Threads: threads, Pipeline: pipeline})
}

// CeilingArgs returns redis-benchmark's command line for EVALSHA of the
// script named sha, as the stores send a Take of cost from limit with the
// server's clock, against addr as spec says: on one key (keys 1, the key
// ceiling:0) or on keys chosen at random (redis-benchmark replaces
// __rand_int__ by 12 digits below -r).
func CeilingArgs(addr, sha string, limit spigot.Limit, cost int64, spec CeilingSpec, keys int) ([]string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("spigot: bench: address %q: %w", addr, err)
	}
	args := []string{
		"-h", host, "-p", port,
		"-c", strconv.Itoa(max(spec.Concurrency, 1)), "-P", strconv.Itoa(max(spec.Pipeline, 1)), "-n", strconv.FormatInt(max(spec.Requests, 1), 10),
	}
	if spec.Threads > 1 {
		args = append(args, "--threads", strconv.Itoa(spec.Threads))
	}
	args = append(args, "--csv")
	key := "ceiling:0"
	if keys > 1 {
		key = "ceiling:__rand_int__"
		args = append(args, "-r", strconv.Itoa(keys))
	}
	argv := wire.NewArgs(nil).Op(spigot.Op{Limit: limit, N: cost})
	args = append(args, "EVALSHA", sha, "1", store.Key(store.DefaultPrefix, limit, key))
	return append(args, argv[:]...), nil
}

// MeasureCeiling runs redis-benchmark (or valkey-benchmark) at path with
// args (from CeilingArgs for spec) against the server at addr, and
// returns its throughput with the CPU time of the server's main thread
// over the run, whether that saturated it, and what other work took of
// the machine (redis-benchmark's CPU counted as the run's own, and the
// server's when local).
func MeasureCeiling(path, addr string, spec CeilingSpec, args []string, local bool) (Ceiling, error) {
	c := Ceiling{Tool: filepath.Base(path), Concurrency: max(spec.Concurrency, 1), Threads: max(spec.Threads, 1), Pipeline: max(spec.Pipeline, 1)}
	m := &Meter{Serving: []string{addr}, Local: local}
	mainStart, err := ServerMainCPU(addr)
	if err != nil {
		return c, err
	}
	start, err := m.Read()
	if err != nil {
		return c, err
	}
	rps, child, err := redisBenchmark(path, args)
	if err != nil {
		return c, err
	}
	end, err := m.Read()
	if err != nil {
		return c, err
	}
	mainEnd, err := ServerMainCPU(addr)
	if err != nil {
		return c, err
	}
	wall := end.At.Sub(start.At)
	c.Throughput = rps
	c.ServerCPUPct = 100 * (mainEnd - mainStart).Seconds() / wall.Seconds()
	c.Saturated = c.ServerCPUPct >= SaturatedPct
	if other, ok := OtherPct(start.Machine, end.Machine, m.Own(start, end)+child, wall); ok {
		c.OtherCPUPct = &other
	}
	return c, nil
}

// RedisBenchmark runs redis-benchmark (or valkey-benchmark) at path with
// args (which include --csv) and returns the requests per second it
// reports.
func RedisBenchmark(path string, args []string) (float64, error) {
	rps, _, err := redisBenchmark(path, args)
	return rps, err
}

// redisBenchmark is RedisBenchmark, and also returns the CPU time that
// the tool used.
func redisBenchmark(path string, args []string) (rps float64, cpu time.Duration, err error) {
	tool := filepath.Base(path)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("spigot: bench: %s: %v\n%s%s", tool, err, stdout.Bytes(), stderr.Bytes())
	}
	cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if stderr.Len() > 0 { // e.g. "Error from server: NOSCRIPT …"
		return 0, cpu, fmt.Errorf("spigot: bench: %s: %s", tool, stderr.Bytes())
	}
	r := csv.NewReader(&stdout)
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		return 0, cpu, fmt.Errorf("spigot: bench: %s: reading its CSV: %v", tool, err)
	}
	for _, rec := range recs {
		if len(rec) >= 2 && rec[0] != "test" {
			rps, err := strconv.ParseFloat(rec[1], 64)
			if err != nil {
				return 0, cpu, fmt.Errorf("spigot: bench: %s: rps %q: %v", tool, rec[1], err)
			}
			return rps, cpu, nil
		}
	}
	return 0, cpu, errors.New("spigot: bench: " + tool + ": no result in its output")
}
