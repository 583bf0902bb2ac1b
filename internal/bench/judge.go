package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The rules by which Judge warns.
const (
	// BusyPct is the share of the machine's CPUs, in percent, that other
	// work may take while a cell or a ceiling runs before its figures are
	// called unreliable ("machine_busy"). On a machine that the client and
	// the server share, what others take is taken from them.
	BusyPct = 20.0
	// SaturatedPct is the CPU time of the server's main thread, in percent
	// of one core over a ceiling's run, from which the server, not the
	// client, is taken to have set the ceiling.
	SaturatedPct = 90.0
	// DenyTolerance is how far, as a share (0.01 is one percentage
	// point), the share of requests denied may be from what -deny asked
	// before the cell says so ("deny_share_off"). The share is exact by
	// construction to within one request per goroutine, so only a cell
	// with very few requests a goroutine, or with errors, or a store that
	// admitted on an exhausted key, misses it.
	DenyTolerance = 0.01
	// MinJudgedTicks is the clock ticks of /proc/stat, per CPU, that a
	// cell must span for its OtherCPUPct to be known: at Linux's 100 ticks
	// a second, half a second, so that a tick's rounding moves the figure
	// by no more than a few points.
	MinJudgedTicks = 50
)

// Judge sets the Warnings of every cell and ceiling of r from their
// figures, replacing any they had, by the rules of BusyPct,
// SaturatedPct and DenyTolerance, and of a cell's throughput against its
// own ceiling (Cell.Pipelines). It reads nothing but r.
func Judge(r *Report) {
	var plain, pipelined *Ceiling
	for i := range r.Ceilings {
		c := &r.Ceilings[i]
		c.Warnings = nil
		if c.Pipeline == 1 && plain == nil {
			plain = c
		}
		if c.Pipeline > 1 && pipelined == nil {
			pipelined = c
		}
		if !c.Saturated {
			c.Warnings = append(c.Warnings, Warning{CeilingUnsaturated, fmt.Sprintf(
				"the server's main thread used %s of a core (saturated from %s): the client set %s ops/s, a floor of the server's ceiling",
				pct(c.ServerCPUPct), pct(SaturatedPct), formatRate(c.Throughput))})
		}
		if w, ok := busy(c.OtherCPUPct); ok {
			c.Warnings = append(c.Warnings, w)
		}
	}
	for i := range r.Cells {
		c := &r.Cells[i]
		c.Warnings = nil
		own, ceiling, which := c.CeilingPct, plain, "unpipelined"
		if c.Pipelines {
			own, ceiling, which = c.CeilingPipelinedPct, pipelined, "pipelined"
		}
		if own > 100 && ceiling != nil && !c.GroupCommit {
			c.Warnings = append(c.Warnings, Warning{AboveCeiling, fmt.Sprintf(
				"%s ops/s is %s of the %s ceiling (%s ops/s): that ceiling is not the server's limit",
				formatRate(c.Throughput), pct(own), which, formatRate(ceiling.Throughput))})
		}
		if w, ok := busy(c.OtherCPUPct); ok {
			c.Warnings = append(c.Warnings, w)
		}
		if c.DenyAsked > 0 && math.Abs(c.DenyShare-c.DenyAsked) > DenyTolerance+1e-9 {
			c.Warnings = append(c.Warnings, Warning{DenyShareOff, fmt.Sprintf(
				"denied %s of the requests; -deny asked %s (within %s)",
				sharePct(c.DenyShare), sharePct(c.DenyAsked), sharePct(DenyTolerance))})
		}
	}
}

func busy(other *float64) (Warning, bool) {
	if other == nil || *other < BusyPct {
		return Warning{}, false
	}
	return Warning{MachineBusy, fmt.Sprintf("other work took %s of the machine's CPUs (warned from %s)", pct(*other), pct(BusyPct))}, true
}

// pct writes a percentage with no decimal: "62%".
func pct(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) + "%" }

// sharePct writes a share (0.2) as a percentage with at most one decimal:
// "20%", "19.5%".
func sharePct(v float64) string {
	s := strconv.FormatFloat(100*v, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + "%"
}

// A MachineCPU is the CPU time of the whole machine so far, in the clock
// ticks of /proc/stat, summed over its CPUs. The zero MachineCPU is
// unknown (off Linux, or when /proc/stat cannot be read).
type MachineCPU struct {
	Busy, Total int64 // ticks: busy (user, nice, system, steal), and all (those, idle, iowait, irq, softirq)
	CPUs        int   // the CPUs /proc/stat lists
}

// Known reports whether m was read.
func (m MachineCPU) Known() bool { return m.CPUs > 0 }

// parseProcStat reads the machine's CPU time from the text of
// /proc/stat: the "cpu" line's fields user, nice, system, idle, iowait,
// irq, softirq and steal (guest time is counted in user already), and
// the number of "cpuN" lines. Interrupts are counted in the total but
// not as busy: the kernel does not say whose they are, and on a loopback
// benchmark most are the benchmark's own traffic.
func parseProcStat(s string) (MachineCPU, error) {
	var m MachineCPU
	found := false
	for line := range strings.SplitSeq(s, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], "cpu") {
			continue
		}
		if fields[0] != "cpu" {
			m.CPUs++
			continue
		}
		if len(fields) < 9 {
			return MachineCPU{}, fmt.Errorf("spigot: bench: /proc/stat: %d fields on the cpu line; want 8 or more", len(fields)-1)
		}
		var v [8]int64
		for i := range v {
			n, err := strconv.ParseInt(fields[1+i], 10, 64)
			if err != nil || n < 0 {
				return MachineCPU{}, fmt.Errorf("spigot: bench: /proc/stat: cpu field %d is %q", i+1, fields[1+i])
			}
			v[i] = n
		}
		user, nice, system, idle, iowait, irq, softirq, steal := v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
		m.Busy = user + nice + system + steal
		m.Total = m.Busy + idle + iowait + irq + softirq
		found = true
	}
	if !found || m.CPUs == 0 {
		return MachineCPU{}, fmt.Errorf("spigot: bench: /proc/stat: no cpu lines")
	}
	return m, nil
}

// OtherPct returns the share of the machine's CPU time, in percent of all
// its CPUs, that went to work other than own (spigot bench's CPU time, and
// a local server's) between start and end, wall apart; false when it
// cannot be known: either reading unknown, or fewer than MinJudgedTicks a
// CPU between them. It is the machine's busy share less own's share of
// the CPUs over wall, at least 0.
func OtherPct(start, end MachineCPU, own, wall time.Duration) (float64, bool) {
	if !start.Known() || !end.Known() || wall <= 0 {
		return 0, false
	}
	total, busy := end.Total-start.Total, end.Busy-start.Busy
	if total < int64(MinJudgedTicks*end.CPUs) || busy < 0 {
		return 0, false
	}
	machine := float64(busy) / float64(total)
	ours := own.Seconds() / (wall.Seconds() * float64(end.CPUs))
	return 100 * min(1, max(0, machine-ours)), true
}
