package loadbench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/filejournal"
)

// Sample is the measurement of one cell, or, in a Row's Median, the median
// of each field over the runs.
type Sample struct {
	Ops            int64         `json:"ops"`
	Errors         int64         `json:"errors"`
	Elapsed        time.Duration `json:"elapsed_ns"`
	RequestsPerSec float64       `json:"requests_per_sec"`
	P50            time.Duration `json:"p50_ns"`
	P99            time.Duration `json:"p99_ns"`
	// AllocsPerOp and BytesPerOp are the process's heap allocations
	// (runtime.MemStats Mallocs and TotalAlloc) during the measurement,
	// divided by the operations: the in-process target's share included.
	AllocsPerOp float64 `json:"allocs_per_op"`
	BytesPerOp  float64 `json:"bytes_per_op"`
	// CPUPerOp is the process's CPU time (user and system, every
	// goroutine: the in-process target's included) during the
	// measurement, divided by the operations; zero where it cannot be
	// read. Unlike requests/s it does not depend on how much of the
	// machine other processes leave.
	CPUPerOp time.Duration `json:"cpu_per_op_ns"`
	// GCShare is the collector's share of the process's CPU during the
	// measurement, as the runtime estimates it (runtime/metrics
	// /cpu/classes/gc/total over /cpu/classes/total).
	GCShare float64 `json:"gc_cpu_share"`
	// LiveHeapBytes is the heap the last collection of the measurement
	// found live (runtime/metrics /gc/heap/live): what the client keeps.
	LiveHeapBytes uint64 `json:"live_heap_bytes"`
	// FsyncsPerOp is the journal's fsyncs per operation (idem+journal),
	// or its intent commits per operation (idem+postgres), each of which
	// PostgreSQL flushes to its WAL: below 1 when group commit shares
	// them.
	FsyncsPerOp float64 `json:"fsyncs_per_op,omitempty"`
	// FirstError is the first failed request's error, if any failed.
	FirstError string `json:"first_error,omitempty"`
	// Recovery is the reopening of the cell's journal (idem+journal only).
	Recovery *Recovery `json:"recovery,omitempty"`
}

// Recovery measures the opening of a journal a cell wrote: reading and
// checking every record and rebuilding the index.
type Recovery struct {
	Records       int64         `json:"records"`
	Operations    int           `json:"operations"`
	Elapsed       time.Duration `json:"elapsed_ns"`
	RecordsPerSec float64       `json:"records_per_sec"`
	// HeapBytesPerOp is the live heap the open journal holds, per
	// operation it knows.
	HeapBytesPerOp float64 `json:"heap_bytes_per_op"`
}

// worker is one concurrent caller of a cell.
type worker struct {
	id       int
	n        uint64 // operations started, warm-up included
	hist     histogram
	ops      int64
	errs     int64
	firstErr error
}

// runCell measures one cell on fresh instances of its target, transport,
// client and journal. seq names its files.
func runCell(ctx context.Context, cfg Config, c Cell, seq int) (Sample, error) {
	ep, err := startTarget(ctx, c.Target, cfg.Dir, cfg.PostgresDSN, seq)
	if err != nil {
		return Sample{}, err
	}
	defer ep.close()
	tr := newTransport(c.Concurrency)
	defer tr.CloseIdleConnections()
	d, err := newDriver(c.Client, ep, tr, cfg.Dir, cfg.PostgresDSN, seq)
	if err != nil {
		return Sample{}, err
	}
	closed := false
	defer func() {
		if !closed {
			d.close()
		}
	}()
	workers := make([]*worker, c.Concurrency)
	for i := range workers {
		workers[i] = &worker{id: i}
	}

	drive(ctx, d, workers, cfg.Warmup, false)
	if err := ctx.Err(); err != nil {
		return Sample{}, err
	}
	id, _ := d.(*idemDriver)
	var syncs0 uint64
	if id != nil {
		syncs0 = id.syncs()
	}
	runtime.GC() // the previous cell's garbage is not this cell's
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0, cpuOK := processCPU()
	gc0 := readGC()
	elapsed := drive(ctx, d, workers, cfg.Duration, true)
	gc1 := readGC()
	cpu1, _ := processCPU()
	runtime.ReadMemStats(&m1)
	if err := ctx.Err(); err != nil {
		return Sample{}, err
	}

	var h histogram
	s := Sample{Elapsed: elapsed}
	for _, w := range workers {
		h.merge(&w.hist)
		s.Ops += w.ops
		s.Errors += w.errs
		if w.firstErr != nil && s.FirstError == "" {
			s.FirstError = w.firstErr.Error()
		}
	}
	if s.Ops == 0 {
		return Sample{}, fmt.Errorf("loadbench: %s: no operation finished in %v", c, cfg.Duration)
	}
	ops := float64(s.Ops)
	s.RequestsPerSec = ops / elapsed.Seconds()
	s.P50, s.P99 = h.quantile(0.5), h.quantile(0.99)
	s.AllocsPerOp = float64(m1.Mallocs-m0.Mallocs) / ops
	s.BytesPerOp = float64(m1.TotalAlloc-m0.TotalAlloc) / ops
	if cpuOK {
		s.CPUPerOp = time.Duration(float64(cpu1-cpu0) / ops)
	}
	if total := gc1.total - gc0.total; total > 0 {
		s.GCShare = (gc1.gc - gc0.gc) / total
	}
	s.LiveHeapBytes = gc1.live
	if id != nil && (id.journal != nil || id.pg != nil) {
		s.FsyncsPerOp = float64(id.syncs()-syncs0) / ops
	}

	closed = true
	if err := d.close(); err != nil {
		return Sample{}, fmt.Errorf("loadbench: %s: %w", c, err)
	}
	if id != nil && id.journal != nil {
		path := id.journal.Path()
		rec, err := measureRecovery(path)
		os.Remove(path)
		os.Remove(path + ".lock")
		if err != nil {
			return Sample{}, fmt.Errorf("loadbench: %s: %w", c, err)
		}
		s.Recovery = &rec
	}
	return s, nil
}

// drive runs the workers against d for dur, or until ctx ends, and returns
// the time until the last of them finished its last operation. With record,
// the workers count and time their operations.
func drive(ctx context.Context, d driver, workers []*worker, dur time.Duration, record bool) time.Duration {
	var stop atomic.Bool
	timer := time.AfterFunc(dur, func() { stop.Store(true) })
	defer timer.Stop()
	cancelled := context.AfterFunc(ctx, func() { stop.Store(true) })
	defer cancelled()
	start := time.Now()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			for !stop.Load() {
				t0 := time.Now()
				err := d.do(ctx, w.id, w.n)
				lat := time.Since(t0)
				w.n++
				if !record {
					continue
				}
				w.ops++
				w.hist.record(lat)
				if err != nil {
					w.errs++
					if w.firstErr == nil {
						w.firstErr = err
					}
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// measureRecovery opens the journal at path, as a restarted process does,
// and measures how fast it is read and how much memory its index holds.
func measureRecovery(path string) (Recovery, error) {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	t0 := time.Now()
	j, err := filejournal.Open(path, filejournal.Options{})
	elapsed := time.Since(t0)
	if err != nil {
		return Recovery{}, fmt.Errorf("reopening the journal: %w", err)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	st := j.Stats()
	if err := j.Close(); err != nil {
		return Recovery{}, fmt.Errorf("closing the reopened journal: %w", err)
	}
	r := Recovery{Records: st.Records, Operations: st.Operations, Elapsed: elapsed}
	r.RecordsPerSec = float64(st.Records) / elapsed.Seconds()
	if st.Operations > 0 {
		r.HeapBytesPerOp = float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / float64(st.Operations)
	}
	return r, nil
}

// gcReading is what readGC reads from runtime/metrics.
type gcReading struct {
	gc, total float64 // CPU seconds: the collector's, and the process's
	live      uint64  // the heap the last collection found live
}

// readGC reads the collector's CPU time, the process's, and the live heap.
func readGC() gcReading {
	s := []metrics.Sample{
		{Name: "/cpu/classes/gc/total:cpu-seconds"},
		{Name: "/cpu/classes/total:cpu-seconds"},
		{Name: "/gc/heap/live:bytes"},
	}
	metrics.Read(s)
	return gcReading{gc: s[0].Value.Float64(), total: s[1].Value.Float64(), live: s[2].Value.Uint64()}
}
