// Package bench is spigot's measuring code, shared by the go test
// benchmarks (bench_*_test.go) and spigot bench: the clients and their raw
// baselines, the meter of client, server and machine CPU, the runner of a
// cell with its latency histogram and its exact share of denials,
// redis-benchmark's ceiling and whether it saturated the server, a local
// server to measure against, the rules that warn when a figure may not
// be trusted (Judge), and the outputs (table, JSON, plot).
package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spigot-go/spigot/internal/resp"
)

// A Meter reads the CPU time that the client (this process) and the
// servers have spent, for metrics that the load of other processes on a
// shared machine changes much less than throughput. On a machine whose
// cores the client and the servers share, throughput follows their sum.
// With several serving servers (a cluster's primaries) it also counts the
// scripts each one ran, to show how the requests spread. It also reads
// the whole machine's CPU time (where it can), so that a run can tell what
// other work took. The zero Meter reads the client and the machine only.
type Meter struct {
	Serving  []string // the addresses of the servers that serve requests
	Replicas []string // a cluster's replicas, metered apart
	// Local is true when the servers run on this machine: their CPU
	// time is then counted as the run's own, not as other work's.
	Local bool
}

// A Reading is what a Meter read at one instant.
type Reading struct {
	At       time.Time     // when it was read
	Machine  MachineCPU    // the whole machine's CPU time
	Client   time.Duration // this process's CPU time
	Server   time.Duration // the serving servers' CPU time
	Replicas time.Duration // the replicas' CPU time
	// ScriptTime is the serving servers' time inside EVALSHA and EVAL,
	// by their own clocks.
	ScriptTime time.Duration
	// Scripts and Rejected are, with several serving servers, each one's
	// EVALSHA and EVAL calls that ran and that it rejected (redirections).
	Scripts, Rejected []int64
}

// Read reads the meter now.
func (m *Meter) Read() (Reading, error) {
	r := Reading{At: time.Now(), Machine: ReadMachineCPU(), Client: CPUTime()}
	for _, addr := range m.Serving {
		cpu, err := ServerCPU(addr)
		if err != nil {
			return r, err
		}
		ran, rejected, usec, err := ScriptCalls(addr)
		if err != nil {
			return r, err
		}
		r.Server += cpu
		r.ScriptTime += time.Duration(usec) * time.Microsecond
		if len(m.Serving) > 1 {
			r.Scripts = append(r.Scripts, ran)
			r.Rejected = append(r.Rejected, rejected)
		}
	}
	for _, addr := range m.Replicas {
		cpu, err := ServerCPU(addr)
		if err != nil {
			return r, err
		}
		r.Replicas += cpu
	}
	return r, nil
}

// Own returns the CPU time that the client and, when m.Local, the
// servers spent between start and end: what is not other work's.
func (m *Meter) Own(start, end Reading) time.Duration {
	own := end.Client - start.Client
	if m.Local {
		own += end.Server - start.Server + end.Replicas - start.Replicas
	}
	return own
}

// Costs are what n requests cost between two readings, per request.
type Costs struct {
	ClientCPU  time.Duration // cpu-ns/op: the whole process
	ServerCPU  time.Duration // server-cpu-ns/op
	ScriptTime time.Duration // script-ns/op
	ReplicaCPU time.Duration // replica-cpu-ns/op
	// With several serving servers: each one's share of the scripts run
	// (percent), the largest distance of a share from an even split
	// (points), the scripts run and the calls rejected per request.
	Shares         []float64
	MaxShareDev    float64
	ScriptsPerOp   float64
	RedirectsPerOp float64
}

// Per returns the costs per request of n requests between start and end.
func Per(start, end Reading, n int64) Costs {
	if n < 1 {
		n = 1
	}
	per := func(d time.Duration) time.Duration { return d / time.Duration(n) }
	c := Costs{
		ClientCPU:  per(end.Client - start.Client),
		ServerCPU:  per(end.Server - start.Server),
		ScriptTime: per(end.ScriptTime - start.ScriptTime),
		ReplicaCPU: per(end.Replicas - start.Replicas),
	}
	if len(end.Scripts) > 1 && len(start.Scripts) == len(end.Scripts) {
		var ran, rejected int64
		for i := range end.Scripts {
			ran += end.Scripts[i] - start.Scripts[i]
			rejected += end.Rejected[i] - start.Rejected[i]
		}
		even := 100 / float64(len(end.Scripts))
		for i := range end.Scripts {
			s := 0.0
			if ran > 0 {
				s = 100 * float64(end.Scripts[i]-start.Scripts[i]) / float64(ran)
			}
			c.Shares = append(c.Shares, s)
			c.MaxShareDev = max(c.MaxShareDev, math.Abs(s-even))
		}
		c.ScriptsPerOp = float64(ran) / float64(n)
		c.RedirectsPerOp = float64(rejected) / float64(n)
	}
	return c
}

// ServerCPU returns the CPU time, system and user, of the server at addr
// so far, from INFO cpu.
func ServerCPU(addr string) (time.Duration, error) {
	info, err := resp.Info(addr, "cpu")
	if err != nil {
		return 0, fmt.Errorf("spigot: bench: INFO cpu on %s: %w", addr, err)
	}
	var d time.Duration
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		sec, err := strconv.ParseFloat(info[f], 64)
		if err != nil {
			return 0, fmt.Errorf("spigot: bench: INFO cpu on %s: %s: %w", addr, f, err)
		}
		d += time.Duration(sec * float64(time.Second))
	}
	return d, nil
}

// ServerMainCPU returns the CPU time, system and user, of the main thread
// of the server at addr so far (the thread that runs scripts), from INFO
// cpu; the whole server's when INFO does not say (before Redis 6.2).
func ServerMainCPU(addr string) (time.Duration, error) {
	info, err := resp.Info(addr, "cpu")
	if err != nil {
		return 0, fmt.Errorf("spigot: bench: INFO cpu on %s: %w", addr, err)
	}
	fields := []string{"used_cpu_sys_main_thread", "used_cpu_user_main_thread"}
	if info[fields[0]] == "" {
		fields = []string{"used_cpu_sys", "used_cpu_user"}
	}
	var d time.Duration
	for _, f := range fields {
		sec, err := strconv.ParseFloat(info[f], 64)
		if err != nil {
			return 0, fmt.Errorf("spigot: bench: INFO cpu on %s: %s: %w", addr, f, err)
		}
		d += time.Duration(sec * float64(time.Second))
	}
	return d, nil
}

// ScriptCalls returns the EVALSHA and EVAL calls that the server at addr
// ran, those it rejected (with a MOVED reply, on a cluster), and the
// microseconds it spent in them, so far, from INFO commandstats.
func ScriptCalls(addr string) (ran, rejected, usec int64, err error) {
	info, err := resp.Info(addr, "commandstats")
	if err != nil {
		return 0, 0, 0, fmt.Errorf("spigot: bench: INFO commandstats on %s: %w", addr, err)
	}
	for _, cmd := range []string{"cmdstat_evalsha", "cmdstat_eval"} {
		// calls=3,usec=…,usec_per_call=…,rejected_calls=0,failed_calls=0;
		// a command never called has no line.
		for f := range strings.SplitSeq(info[cmd], ",") {
			k, v, _ := strings.Cut(f, "=")
			var sum *int64
			switch k {
			case "calls":
				sum = &ran
			case "rejected_calls":
				sum = &rejected
			case "usec":
				sum = &usec
			default:
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, 0, 0, fmt.Errorf("spigot: bench: INFO commandstats on %s: %s:%s: %w", addr, cmd, info[cmd], err)
			}
			*sum += n
		}
	}
	return ran, rejected, usec, nil
}
