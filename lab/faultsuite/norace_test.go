//go:build !race

package faultsuite

// raceEnabled says the test binary was built with -race.
const raceEnabled = false
