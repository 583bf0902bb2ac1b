//go:build !unix

package bench

import "time"

// CPUTime returns 0: the process's CPU time is read on Unix only.
func CPUTime() time.Duration { return 0 }
