package fileengine

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchIDs returns n distinct operation IDs, made before the timer runs so
// that allocations per Begin are the journal's own.
func benchIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = prefix + strconv.Itoa(i)
	}
	return ids
}

// benchIntent is a typical intent: a UUID key, a SHA-256 fingerprint, a
// short URL.
func benchIntent(id string) Intent {
	return Intent{
		ID:          id,
		Key:         "6f1c2f4e-8a5b-4c3d-9e7f-0a1b2c3d4e5f",
		Fingerprint: [32]byte{1, 2, 3, 4, 5, 6, 7, 8},
		Method:      http.MethodPost,
		URL:         "https://api.example.test/charges",
		Created:     testNow,
		KeyTTL:      DefaultKeyTTL,
	}
}

func BenchmarkJournalBeginSerial(b *testing.B) {
	j, err := Open(journalPath(b), quietOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	ids := benchIDs("op-", 1<<16)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == len(ids) {
			b.StopTimer()
			ids = benchIDs(fmt.Sprintf("op-%d-", i), len(ids))
			i = 0
			b.StartTimer()
		}
		if err := j.Begin(benchIntent(ids[i])); err != nil {
			b.Fatal(err)
		}
		i++
	}
	st := j.Stats()
	b.ReportMetric(float64(st.Syncs-1)/float64(b.N), "fsyncs/op") // less the one of creation
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "begins/s")
}

func BenchmarkJournalBeginConcurrent(b *testing.B) {
	for _, appenders := range []int{16, 64} {
		b.Run(fmt.Sprintf("appenders=%d", appenders), func(b *testing.B) {
			j, err := Open(journalPath(b), quietOptions())
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			ids := benchIDs("op-", b.N)
			syncs := j.Stats().Syncs
			var next atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range appenders {
				wg.Go(func() {
					<-start
					for {
						i := next.Add(1) - 1
						if i >= int64(len(ids)) {
							return
						}
						if err := j.Begin(benchIntent(ids[i])); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			b.ReportAllocs()
			b.ResetTimer()
			close(start)
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(j.Stats().Syncs-syncs)/float64(b.N), "fsyncs/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "begins/s")
		})
	}
}

func BenchmarkJournalComplete(b *testing.B) {
	j, err := Open(journalPath(b), quietOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	if err := j.Begin(benchIntent("op")); err != nil {
		b.Fatal(err)
	}
	done := Completion{ID: "op", State: Done, Completed: testNow, Status: 201,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ch_123","status":"succeeded"}`)}
	b.ReportAllocs()
	for b.Loop() {
		if err := j.Complete(done); err != nil {
			b.Fatal(err)
		}
	}
}

// writeBenchJournal writes a journal of ops operations, each an intent and
// a completion (so 2*ops records), without fsyncs. A fraction live of the
// completions is recent; the rest are two days old, garbage for compaction.
func writeBenchJournal(b *testing.B, path string, ops int, live float64) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	buf := appendFileHeader(nil)
	header := http.Header{"Content-Type": {"application/json"}}
	body := []byte(`{"id":"ch_123","status":"succeeded"}`)
	liveEvery := int(1 / live)
	for i := range ops {
		r := Record{ID: "op-" + strconv.Itoa(i), Key: "6f1c2f4e-8a5b-4c3d-9e7f-0a1b2c3d4e5f",
			Method: http.MethodPost, URL: "https://api.example.test/charges", Created: testNow.Add(-49 * time.Hour).UnixNano()}
		r.Fingerprint[0] = byte(i)
		var start int
		buf, start = beginRecord(buf)
		buf, _ = endRecord(appendIntent(buf, &r), start, recIntent)
		completed := testNow.Add(-48 * time.Hour)
		if i%liveEvery == 0 {
			completed = testNow.Add(-time.Hour)
		}
		o := newOutcomeInto(nil, completed, 201, 0, header, body)
		buf, start = beginRecord(buf)
		buf, _ = endRecord(appendCompletion(buf, r.ID, Done, &o), start, recCompletion)
		if len(buf) > 1<<16 {
			w.Write(buf)
			buf = buf[:0]
		}
	}
	w.Write(buf)
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkJournalOpen(b *testing.B) {
	for _, records := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("records=%d", records), func(b *testing.B) {
			path := journalPath(b)
			writeBenchJournal(b, path, records/2, 1)
			fi, _ := os.Stat(path)
			o := quietOptions()
			o.CompactMinSize = -1
			b.SetBytes(fi.Size())
			b.ReportAllocs()
			for b.Loop() {
				j, err := Open(path, o)
				if err != nil {
					b.Fatal(err)
				}
				if st := j.Stats(); st.Records != int64(records) {
					b.Fatalf("recovered %d records, want %d", st.Records, records)
				}
				j.Close()
			}
			b.ReportMetric(float64(records)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkJournalCompact compacts a journal of 1,000,000 records of which
// 10% are live: "forget" drops the rest (ForgetAfter at KeyTTL), "summarize"
// keeps them as summaries (the default), so every record stays.
func BenchmarkJournalCompact(b *testing.B) {
	const records = 1_000_000
	dir := b.TempDir()
	master := filepath.Join(dir, "master.journal")
	writeBenchJournal(b, master, records/2, 0.1)
	for _, bc := range []struct {
		name   string
		forget time.Duration
		kept   int64
	}{
		{"forget", DefaultKeyTTL, records / 10},
		{"summarize", 0, records},
	} {
		b.Run(bc.name, func(b *testing.B) {
			path := filepath.Join(dir, "ops.journal")
			o := quietOptions()
			o.CompactMinSize = -1
			o.ForgetAfter = bc.forget
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				copyFile(b, master, path)
				j, err := Open(path, o)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := j.Compact(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if st := j.Stats(); st.Records != bc.kept {
					b.Fatalf("compaction kept %d records, want %d", st.Records, bc.kept)
				}
				j.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(records)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

func copyFile(b *testing.B, from, to string) {
	src, err := os.Open(from)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		b.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkJournalMemoryPerOperation reports the heap an open journal
// holds per operation it knows: its index, rebuilt by recovery. Every
// operation is live (completed within KeyTTL), with a 36-byte response
// body and one header, as writeBenchJournal writes them; a larger recorded
// body costs its size on top.
//
//	go test -run '^$' -bench JournalMemoryPerOperation -benchtime 3x ./internal/fileengine
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
				j, err := Open(path, o)
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
