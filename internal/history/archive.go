package history

import (
	"context"
	"time"
)

// The long history: beyond the store's window (an hour), an event's samples are kept
// downsampled in SQL (package sqlstore implements Archive), a bucket per minute for a day and
// a bucket per ten minutes for a month. A bucket is the last sample taken in its span (the
// running totals at its end: joins, admissions, abandonment, refusals, sold), the largest
// line seen in it, and the event's measured waits up to its end, so that rates, percentiles
// and totals over any run of buckets are differences of its ends, exactly as over samples.
// The sampler (package recorder) writes them as it samples.

// The spans of the long history and how long each is kept.
const (
	MinuteSpan    = time.Minute
	MinuteKeep    = 24 * time.Hour
	TenMinuteSpan = 10 * time.Minute
	TenMinuteKeep = 30 * 24 * time.Hour
)

// Spans are the long history's spans, finest first, with how long each is kept.
var Spans = []struct {
	Span, Keep time.Duration
}{{MinuteSpan, MinuteKeep}, {TenMinuteSpan, TenMinuteKeep}}

// KeepOf is how long buckets of span are kept (0: no such span).
func KeepOf(span time.Duration) time.Duration {
	for _, s := range Spans {
		if s.Span == span {
			return s.Keep
		}
	}
	return 0
}

// Bucket is one span of an event's long history.
type Bucket struct {
	Event string
	// Epoch is the life of the event it belongs to (event.Event.Epoch): the buckets of an
	// event deleted and created again under the same id are not the new one's.
	Epoch string
	Span  time.Duration // MinuteSpan or TenMinuteSpan
	Start time.Time     // the span's start: a multiple of Span since the Unix epoch
	// Sample is the last sample taken in the span (its At inside it).
	Sample EventSample
	// WaitingMax is the longest line of the samples taken in the span.
	WaitingMax int64
	// Waits are the measured waits of the event's life at the span's end (running totals).
	Waits Waits
}

// Archive keeps the long history (package sqlstore). Each method is one statement, safe for
// concurrent use by any number of instances.
type Archive interface {
	// PutBucket writes b over the bucket of the same event, span and start unless the one
	// kept has a later sample of the same life; WaitingMax is the larger of the two within
	// one life. Errors: the database's.
	PutBucket(ctx context.Context, b Bucket) error
	// Buckets returns the buckets of event's life epoch and span whose sample is after since,
	// oldest first. Errors: the database's.
	Buckets(ctx context.Context, event, epoch string, span time.Duration, since time.Time) ([]Bucket, error)
	// PruneBuckets drops the buckets of span that start before before, of every event.
	// Errors: the database's.
	PruneBuckets(ctx context.Context, span time.Duration, before time.Time) error
}

// SpanStart is the start of the span holding t.
func SpanStart(t time.Time, span time.Duration) time.Time {
	return t.Truncate(span).UTC()
}
