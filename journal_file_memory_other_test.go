//go:build !unix

package idem

import "time"

// cpuTime is not measured here.
func cpuTime() time.Duration { return 0 }
