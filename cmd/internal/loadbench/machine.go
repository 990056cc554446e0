package loadbench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"
)

// Machine describes where the figures were measured.
type Machine struct {
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	GoVersion  string `json:"go_version"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	// Fsync is the latency of an fsync after a small write, in the
	// directory that holds the journals, measured before each run (the
	// disk's latency drifts with what else the machine does).
	Fsync FsyncLatency `json:"fsync"`
}

// FsyncLatency is the measured latency of fsync(2) on one file.
type FsyncLatency struct {
	Dir       string        `json:"dir"`
	Samples   int           `json:"samples"`
	WriteSize int           `json:"write_size"`
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
}

// fsyncWriteSize is the size of the write each probed fsync makes durable:
// about one journal intent record.
const fsyncWriteSize = 128

// describeMachine describes this machine; its fsync latency is filled in
// by the caller from fsyncSamples.
func describeMachine() Machine {
	return Machine{
		GOOS:       runtime.GOOS,
		GOARCH:     runtime.GOARCH,
		GoVersion:  runtime.Version(),
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
	}
}

// fsyncSamples appends fsyncWriteSize bytes to a new file in dir and
// fsyncs it, n times, as the journal does for each group commit, and
// returns how long each fsync alone took.
func fsyncSamples(dir string, n int) ([]time.Duration, error) {
	path := filepath.Join(dir, "fsync-probe")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("loadbench: measuring fsync: %w", err)
	}
	defer os.Remove(path)
	defer f.Close()
	// The file's creation is made durable first, so that the samples time
	// appends only, as a journal's group commits are.
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("loadbench: measuring fsync: %w", err)
	}
	buf := make([]byte, fsyncWriteSize)
	lat := make([]time.Duration, n)
	for i := range lat {
		buf[0] = byte(i)
		if _, err := f.Write(buf); err != nil {
			return nil, fmt.Errorf("loadbench: measuring fsync: %w", err)
		}
		t0 := time.Now()
		if err := f.Sync(); err != nil {
			return nil, fmt.Errorf("loadbench: measuring fsync: %w", err)
		}
		lat[i] = time.Since(t0)
	}
	return lat, nil
}

// summarizeFsync describes the fsyncs measured in dir.
func summarizeFsync(dir string, lat []time.Duration) FsyncLatency {
	sorted := slices.Clone(lat)
	slices.Sort(sorted)
	return FsyncLatency{
		Dir:       dir,
		Samples:   len(sorted),
		WriteSize: fsyncWriteSize,
		P50:       percentile(sorted, 0.5),
		P99:       percentile(sorted, 0.99),
	}
}

// percentile returns the q-th percentile of sorted, by nearest rank.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}
