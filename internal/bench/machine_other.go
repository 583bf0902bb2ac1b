//go:build !linux

package bench

// ReadMachineCPU returns the zero (unknown) MachineCPU: the machine's
// CPU time is read from Linux's /proc/stat only.
func ReadMachineCPU() MachineCPU { return MachineCPU{} }
