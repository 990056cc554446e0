package loadbench

import (
	"math/bits"
	"time"
)

// histogram counts latencies in log-linear buckets: exact below 128ns,
// then 128 buckets per power of two, so a quantile is within 1% of the
// true value. Recording allocates nothing, which keeps the workload's
// allocation counts the clients' own.
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits
	histBuckets = (64 - histSubBits + 1) * histSub
)

func bucketOf(v uint64) int {
	if v < histSub {
		return int(v)
	}
	e := bits.Len64(v) - histSubBits // 1 and up
	return e*histSub + int(v>>(e-1)) - histSub
}

// bucketLow is the smallest value in bucket i.
func bucketLow(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	e := i / histSub
	return uint64(i%histSub+histSub) << (e - 1)
}

// bucketMid is the middle of bucket i: the value a quantile reports.
func bucketMid(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	low := bucketLow(i)
	return low + (bucketLow(i+1)-low)/2
}

func (h *histogram) record(d time.Duration) {
	h.counts[bucketOf(uint64(max(d, 0)))]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the latency below which a fraction q (0 to 1) of the
// recorded ones lie; zero for an empty histogram.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	if rank >= h.n {
		rank = h.n - 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen > rank {
			return time.Duration(bucketMid(i))
		}
	}
	return time.Duration(bucketMid(histBuckets - 1))
}
