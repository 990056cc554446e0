//go:build !unix

package filejournal

import "time"

// cpuTime is not measured here.
func cpuTime() time.Duration { return 0 }
