package idem

import (
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkJournalMemoryPerOperation reports the heap an open journal
// holds per operation it knows: its index, rebuilt by recovery. Every
// operation is live (completed within KeyTTL), with a 36-byte response
// body and one header, as writeBenchJournal writes them; a larger recorded
// body costs its size on top.
//
//	go test -run '^$' -bench JournalMemoryPerOperation -benchtime 3x .
func BenchmarkJournalMemoryPerOperation(b *testing.B) {
	for _, records := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("records=%d", records), func(b *testing.B) {
			path := journalPath(b)
			writeBenchJournal(b, path, records/2, 1)
			o := quietOptions()
			o.CompactMinSize = -1
			var perOp float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				j, err := OpenJournalWithOptions(path, o)
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				st := j.Stats()
				if st.Live != records/2 {
					b.Fatalf("%d live operations, want %d", st.Live, records/2)
				}
				perOp = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(st.Live)
				if err := j.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(perOp, "heap-B/live-op")
		})
	}
}
