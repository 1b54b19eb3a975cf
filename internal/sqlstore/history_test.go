package sqlstore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/history"
)

// TestEventHistoryBuckets: the long history on both databases. A bucket written again keeps the
// later sample and the larger line of its life; an earlier sample never overwrites a later one
// (two samplers racing); a bucket of another life of the event replaces it and is read apart;
// buckets come back oldest first after since; they are pruned by span and age, and deleted with
// their event.
func TestEventHistoryBuckets(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := open(t, b.url(t))
			_, _, err := db.PutEvent(ctx, sampleEvent("hist"))
			require.NoError(t, err)
			t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			bucket := func(min int, at time.Duration, waiting, last int64) history.Bucket {
				start := t0.Add(time.Duration(min) * time.Minute)
				return history.Bucket{Event: "hist", Epoch: "life-1", Span: history.MinuteSpan, Start: start,
					Sample:     history.EventSample{At: start.Add(at), Generation: 3, Waiting: waiting, LastNumber: last, Refusals: [4]int64{1, 2, 3, 4}},
					WaitingMax: waiting, Waits: history.Waits{4: last}}
			}
			require.NoError(t, db.PutBucket(ctx, bucket(0, 10*time.Second, 50, 10)))
			require.NoError(t, db.PutBucket(ctx, bucket(0, 40*time.Second, 20, 30)), "a later sample of the same minute")
			require.NoError(t, db.PutBucket(ctx, bucket(0, 20*time.Second, 90, 15)), "an earlier one, late: its line counts, not its sample")
			require.NoError(t, db.PutBucket(ctx, bucket(1, 5*time.Second, 5, 31)))
			require.NoError(t, db.PutBucket(ctx, bucket(2, 5*time.Second, 5, 32)))
			got, err := db.Buckets(ctx, "hist", "life-1", history.MinuteSpan, time.Time{})
			require.NoError(t, err)
			require.Len(t, got, 3)
			want := bucket(0, 40*time.Second, 20, 30)
			want.WaitingMax = 90
			require.Equal(t, want, got[0])
			require.Equal(t, t0.Add(time.Minute), got[1].Start)
			since, err := db.Buckets(ctx, "hist", "life-1", history.MinuteSpan, got[1].Sample.At)
			require.NoError(t, err)
			require.Len(t, since, 1, "after since")
			none, err := db.Buckets(ctx, "hist", "life-1", history.TenMinuteSpan, time.Time{})
			require.NoError(t, err)
			require.Empty(t, none, "spans apart")

			// Samplers racing on one bucket: whatever the order, the latest sample stays.
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					require.NoError(t, db.PutBucket(ctx, bucket(3, time.Duration(i)*time.Second, int64(i), int64(i))))
				})
			}
			wg.Wait()
			got, err = db.Buckets(ctx, "hist", "life-1", history.MinuteSpan, t0.Add(3*time.Minute))
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, int64(7), got[0].Sample.LastNumber)
			require.Equal(t, int64(7), got[0].WaitingMax)

			// The event deleted and created again: its new life's bucket replaces the old one.
			other := bucket(2, time.Second, 1, 1)
			other.Epoch = "life-2"
			require.NoError(t, db.PutBucket(ctx, other))
			got, err = db.Buckets(ctx, "hist", "life-2", history.MinuteSpan, time.Time{})
			require.NoError(t, err)
			require.Equal(t, []history.Bucket{other}, got, "only the new life's, with its own line")
			got, err = db.Buckets(ctx, "hist", "life-1", history.MinuteSpan, time.Time{})
			require.NoError(t, err)
			require.Len(t, got, 3, "minutes 0, 1 and 3 of the first life")

			require.NoError(t, db.PruneBuckets(ctx, history.MinuteSpan, t0.Add(time.Minute)))
			got, err = db.Buckets(ctx, "hist", "life-1", history.MinuteSpan, time.Time{})
			require.NoError(t, err)
			require.Len(t, got, 2, "minute 0 pruned")
			require.Equal(t, t0.Add(time.Minute), got[0].Start)

			deleted, err := db.DeleteEvent(ctx, "hist")
			require.NoError(t, err)
			require.True(t, deleted)
			got, err = db.Buckets(ctx, "hist", "life-1", history.MinuteSpan, time.Time{})
			require.NoError(t, err)
			require.Empty(t, got, "deleted with the event")
		})
	}
}
