package loadbench

import (
	"testing"
	"time"
)

func TestBucketsCoverValuesInOrder(t *testing.T) {
	prev := -1
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 257, 1000, 1 << 20, 1<<40 + 12345, 1<<63 - 1, 1 << 63, 1<<64 - 1} {
		b := bucketOf(v)
		if b < prev || b >= histBuckets {
			t.Fatalf("bucketOf(%d) = %d after %d (of %d buckets)", v, b, prev, histBuckets)
		}
		if low := bucketLow(b); low > v || (b+1 < histBuckets && bucketLow(b+1) <= v) {
			t.Fatalf("value %d in bucket %d, which starts at %d", v, b, low)
		}
		prev = b
	}
}

func TestQuantilesWithinOnePercent(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 501 * time.Microsecond}, {0.99, 991 * time.Microsecond}, {1, 1000 * time.Microsecond}} {
		got := h.quantile(c.q)
		if diff := got - c.want; diff < -c.want/100 || diff > c.want/100 {
			t.Errorf("quantile(%v) = %v, want %v within 1%%", c.q, got, c.want)
		}
	}
	var empty histogram
	if got := empty.quantile(0.5); got != 0 {
		t.Errorf("empty quantile = %v, want 0", got)
	}
	var merged histogram
	merged.merge(&h)
	merged.merge(&h)
	if merged.n != 2000 || merged.quantile(0.5) != h.quantile(0.5) {
		t.Errorf("merged n %d p50 %v, want 2000 and %v", merged.n, merged.quantile(0.5), h.quantile(0.5))
	}
}
