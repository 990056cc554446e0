package idemotel

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/journal"
)

// PendingListTimeout bounds each count or List a collection of
// idem.journal.pending makes.
const PendingListTimeout = 5 * time.Second

// PendingCounter is a journal that counts its pending operations without
// listing them. A *filejournal.Journal and a *pgjournal.Journal are both
// one.
type PendingCounter interface {
	// Pending returns the number of pending operations whose key has not
	// expired.
	Pending(ctx context.Context) (int, error)
}

// SyncRecorder returns a function for filejournal.Options.OnSync that records
// each group commit's fsync: its duration in idem.journal.fsync.duration
// and the records it made durable in idem.journal.fsync.group_size, both
// with error.type when the fsync failed. Give it to the journal before it
// is opened:
//
//	j, err := filejournal.Open(path, filejournal.Options{OnSync: idemotel.SyncRecorder(opts)})
//
// An instrument that cannot be made is reported to otel.Handle, and its
// records are dropped.
func SyncRecorder(opts Options) func(took time.Duration, records int, err error) {
	meter := opts.meter()
	duration, derr := meter.Float64Histogram("idem.journal.fsync.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of the journal's group-commit fsyncs."),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
	group, gerr := meter.Int64Histogram("idem.journal.fsync.group_size", metric.WithUnit("{record}"),
		metric.WithDescription("Records made durable by each of the journal's group-commit fsyncs."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
	if err := errors.Join(derr, gerr); err != nil {
		otel.Handle(err)
	}
	return func(took time.Duration, records int, err error) {
		// OnSync has no context: the records need none.
		ctx := context.Background()
		var opt []metric.RecordOption
		if err != nil {
			opt = append(opt, metric.WithAttributes(semconv.ErrorType(err)))
		}
		if duration != nil {
			duration.Record(ctx, took.Seconds(), opt...)
		}
		if group != nil {
			group.Record(ctx, int64(records), opt...)
		}
	}
}

// Observe registers the gauges idem.retry_budget.tokens, read from c, and
// idem.journal.pending, read from j; either may be nil, and its gauge is
// then not reported. Give it the Journal of c's Config (a Client without
// one keeps its operations in its own memory, which is not observable).
// The returned function unregisters the gauges' callback; call it when c
// is no longer used.
//
// The gauges are read at each collection. The budget costs a lock. A
// PendingCounter is asked Pending (a *filejournal.Journal counts its
// index in memory, under its lock; a *pgjournal.Journal makes one count
// in the database), and any other Journal List(ctx, journal.ListPending),
// which returns every pending operation whole; each within
// PendingListTimeout at each collection. A failed one is reported as the
// callback's error, and the gauge has no value for that collection. A nil
// pointer as j is no journal.
//
// The gauges carry no attributes: observe one Client and one Journal per
// MeterProvider, or their values share one series.
func Observe(c *idem.Client, j journal.Journal, opts Options) (unregister func() error, err error) {
	if v := reflect.ValueOf(j); v.Kind() == reflect.Pointer && v.IsNil() {
		j = nil
	}
	meter := opts.meter()
	tokens, terr := meter.Float64ObservableGauge("idem.retry_budget.tokens", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens left in the Client's retry budget."))
	pending, perr := meter.Int64ObservableGauge("idem.journal.pending", metric.WithUnit("{operation}"),
		metric.WithDescription("Pending operations of the journal whose key has not expired."))
	if err := errors.Join(terr, perr); err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		if c != nil {
			o.ObserveFloat64(tokens, c.RetryBudgetTokens())
		}
		if j == nil {
			return nil
		}
		n, err := pendingOf(ctx, j)
		if err != nil {
			return err
		}
		o.ObserveInt64(pending, int64(n))
		return nil
	}, tokens, pending)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}

// pendingOf counts j's pending operations whose key has not expired.
func pendingOf(ctx context.Context, j journal.Journal) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, PendingListTimeout)
	defer cancel()
	if pc, ok := j.(PendingCounter); ok {
		n, err := pc.Pending(ctx)
		if err != nil {
			return 0, fmt.Errorf("idemotel: counting the journal's pending operations: %w", err)
		}
		return n, nil
	}
	ops, err := j.List(ctx, journal.ListPending)
	if err != nil {
		return 0, fmt.Errorf("idemotel: listing the journal's pending operations: %w", err)
	}
	return len(ops), nil
}
