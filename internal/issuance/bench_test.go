package issuance_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/issuance"
	"github.com/waitroom/waitroom/internal/token"
)

// BenchmarkEnter measures new entries into one campaign on Redis and PostgreSQL from parallel
// callers (no worker issuing meanwhile): "store" is the coupon store's entry alone (all an
// entry cost before entries were kept in SQL), "service" the entry as answered (the store's,
// then its group-committed write to SQL, then the confirmation).
func BenchmarkEnter(b *testing.B) {
	ctx := context.Background()
	e := newEnv(b, "redis", nil)
	svc, _ := e.service(b, issuance.IssuerConfig{SweepInterval: time.Hour})
	svc.Issuer.Stop()
	const id = "bench"
	_, _, err := svc.Put(ctx, coupon.Campaign{ID: id, Stock: 100_000_000})
	require.NoError(b, err)
	var n atomic.Int64
	b.Run("store", func(b *testing.B) {
		cnt, err := e.store.CampaignCounters(ctx, id)
		require.NoError(b, err)
		_, err = e.store.RaiseCeiling(ctx, id, coupon.Block{Incarnation: cnt.Incarnation, Lo: cnt.Ceiling, Hi: cnt.Ceiling + 1<<40})
		require.NoError(b, err)
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				uid := fmt.Sprint("s", n.Add(1))
				if _, err := e.store.Enter(ctx, id, token.UserKey(uid), uid); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("service", func(b *testing.B) {
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, _, err := svc.Enter(ctx, id, fmt.Sprint("v", n.Add(1))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
