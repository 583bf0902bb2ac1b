//go:build linux

package bench

import "os"

// ReadMachineCPU returns the machine's CPU time so far, from /proc/stat,
// or the zero (unknown) MachineCPU when it cannot be read.
func ReadMachineCPU() MachineCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineCPU{}
	}
	m, err := parseProcStat(string(b))
	if err != nil {
		return MachineCPU{}
	}
	return m
}
