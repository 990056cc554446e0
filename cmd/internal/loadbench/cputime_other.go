//go:build !unix

package loadbench

import "time"

// processCPU is not measured on this system: the report leaves CPU per
// operation out.
func processCPU() (time.Duration, bool) { return 0, false }
