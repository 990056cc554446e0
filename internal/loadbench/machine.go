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
	// directory that holds the journals.
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

// measureMachine describes this machine, measuring the fsync latency of a
// file in dir.
func measureMachine(dir string, samples int) (Machine, error) {
	m := Machine{
		GOOS:       runtime.GOOS,
		GOARCH:     runtime.GOARCH,
		GoVersion:  runtime.Version(),
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
	}
	var err error
	m.Fsync, err = measureFsync(dir, samples)
	return m, err
}

// measureFsync appends fsyncWriteSize bytes to a new file in dir and
// fsyncs it, samples times, as the journal does for each group commit, and
// returns the median and 99th percentile of the fsyncs alone.
func measureFsync(dir string, samples int) (FsyncLatency, error) {
	path := filepath.Join(dir, "fsync-probe")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return FsyncLatency{}, fmt.Errorf("loadbench: measuring fsync: %w", err)
	}
	defer os.Remove(path)
	defer f.Close()
	// The file's creation is made durable first, so that the samples time
	// appends only, as a journal's group commits are.
	if err := f.Sync(); err != nil {
		return FsyncLatency{}, fmt.Errorf("loadbench: measuring fsync: %w", err)
	}
	buf := make([]byte, fsyncWriteSize)
	lat := make([]time.Duration, samples)
	for i := range lat {
		buf[0] = byte(i)
		if _, err := f.Write(buf); err != nil {
			return FsyncLatency{}, fmt.Errorf("loadbench: measuring fsync: %w", err)
		}
		t0 := time.Now()
		if err := f.Sync(); err != nil {
			return FsyncLatency{}, fmt.Errorf("loadbench: measuring fsync: %w", err)
		}
		lat[i] = time.Since(t0)
	}
	slices.Sort(lat)
	return FsyncLatency{
		Dir:       dir,
		Samples:   samples,
		WriteSize: fsyncWriteSize,
		P50:       percentile(lat, 0.5),
		P99:       percentile(lat, 0.99),
	}, nil
}

// percentile returns the q-th percentile of sorted, by nearest rank.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}
