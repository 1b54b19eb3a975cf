package issuance

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/loop"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/store"
	"github.com/waitroom/waitroom/internal/token"
)

// IssuerConfig configures an Issuer.
type IssuerConfig struct {
	Store coupon.Store // required
	// Notifier wakes the worker when entries are queued on any instance. Required.
	Notifier store.Notifier
	DB       *sqlstore.DB // required
	// Campaigns lists the ids of the campaigns to serve. Required.
	Campaigns func() []string
	// Batch is how many entries one Take leases. Defaults to 100.
	Batch int
	// Lease is how long a taken entry stays with this worker before any worker may take it
	// again. Defaults to 30 s (far above the time one batch takes).
	Lease time.Duration
	// SweepInterval is the fallback period of a drain when no wake-up comes (lost Pub/Sub
	// messages, expired leases of a dead worker). Defaults to 1 s.
	SweepInterval time.Duration
	// CallTimeout bounds each store or database call of the worker, so that one that never
	// answers cannot hold it for good. Defaults to 5 s.
	CallTimeout time.Duration
	// Codes makes a new coupon code. Defaults to 12 random characters of [A-Z2-9].
	Codes  func() string
	Logger *slog.Logger // defaults to slog.Default()
	// OnIssued, when set, is called after an entry's coupon is in the database and before its
	// outcome is recorded in the store (tests stop a worker there).
	OnIssued func(campaign string, t coupon.Task)
	// OnLag, when set, is called for every coupon written to the database with its issuance
	// lag: the time from the entry to the coupon's commit (the store's clock up to the take,
	// coupon.Task.Waited, then this process's). Not called for rejected entries, nor for
	// entries whose entry time the store does not know.
	OnLag func(campaign string, lag time.Duration)
	// Recover recovers a campaign from the database (Service.recover; why is logged). When set,
	// it is called when the store asks for it (coupon.ErrNeedsRecovery), and in the background
	// when the worker finds that the store lost data: a task the database does not give to its
	// user, an outcome the store refused.
	Recover func(ctx context.Context, campaign, why string) error
}

// Issuer is the issuance worker of one instance: woken through the Notifier, and every
// SweepInterval, it drains every campaign's queue in entry order.
type Issuer struct {
	cfg      IssuerConfig
	wake     chan struct{}
	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
	bg       sync.WaitGroup
}

// NewIssuer returns an Issuer; Start runs it.
func NewIssuer(cfg IssuerConfig) (*Issuer, error) {
	if cfg.Store == nil || cfg.Notifier == nil || cfg.DB == nil || cfg.Campaigns == nil {
		return nil, errors.New("issuance: IssuerConfig.Store, Notifier, DB and Campaigns are required")
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 100
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 5 * time.Second
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = time.Second
	}
	if cfg.Codes == nil {
		cfg.Codes = NewCode
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Issuer{cfg: cfg, wake: make(chan struct{}, 1)}, nil
}

const codeAlphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"

// NewCode returns a random coupon code: 12 characters of [A-Z2-9] without look-alikes.
func NewCode() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = codeAlphabet[int(b[i])%len(codeAlphabet)]
	}
	return string(b[:])
}

// Kick wakes the worker (as a Pub/Sub message does).
func (w *Issuer) Kick() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Start runs the worker until Stop or ctx ends.
func (w *Issuer) Start(ctx context.Context) {
	ctx, w.cancel = context.WithCancel(ctx)
	w.done = make(chan struct{})
	var subs sync.WaitGroup
	subs.Go(func() {
		w.cfg.Notifier.Subscribe(ctx, store.CouponWakeTopic(), func(string) { w.Kick() }, nil)
	})
	go func() {
		defer close(w.done)
		defer subs.Wait()
		t := time.NewTicker(w.cfg.SweepInterval)
		defer t.Stop()
		for {
			if err := loop.Guard("coupon issuance", w.cfg.Logger, func() error { return w.Drain(ctx) }); err != nil && ctx.Err() == nil {
				w.cfg.Logger.Warn("coupon issuance failed", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			case <-t.C:
			}
		}
	}()
}

// Stop ends the worker and waits for it. Safe before Start and more than once.
func (w *Issuer) Stop() {
	w.stopOnce.Do(func() {
		if w.cancel != nil {
			w.cancel()
			<-w.done
		}
		w.bg.Wait()
	})
}

// Drain issues every campaign's waiting entries (and those whose lease ran out) until none is
// left, and returns the first error.
func (w *Issuer) Drain(ctx context.Context) error {
	var first error
	for _, id := range w.cfg.Campaigns() {
		if err := w.drain(ctx, id); err != nil && !errors.Is(err, coupon.ErrCampaignNotFound) && first == nil {
			first = err
		}
	}
	return first
}

func (w *Issuer) drain(ctx context.Context, id string) error {
	var lost bool // the store lost data: recover the campaign once, after this pass
	defer func() {
		if lost && w.cfg.Recover != nil {
			w.bg.Go(func() {
				if err := w.cfg.Recover(context.WithoutCancel(ctx), id, "the worker found an entry the database refused"); err != nil {
					w.cfg.Logger.Warn("coupon campaign recovery failed; the sync retries", "campaign", id, "err", err)
				}
			})
		}
	}()
	recovered := false
	for ctx.Err() == nil {
		tctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
		tasks, err := w.cfg.Store.Take(tctx, id, w.cfg.Batch, w.cfg.Lease)
		cancel()
		taken := time.Now() // monotonic: the lag after the take is measured here
		if errors.Is(err, coupon.ErrNeedsRecovery) && w.cfg.Recover != nil && !recovered {
			recovered = true // once a pass: a recovery that did not take is retried by the next
			if err = w.cfg.Recover(ctx, id, whyServer); err == nil {
				continue
			}
		}
		if err != nil || len(tasks) == 0 {
			return err
		}
		outcomes := make([]coupon.Outcome, 0, len(tasks))
		for _, t := range tasks {
			if ctx.Err() != nil {
				// Stopped: what is in the database but not recorded is taken again when the
				// lease runs out (an entry issued twice gets its first coupon back).
				return ctx.Err()
			}
			c, err := w.issueHeld(ctx, coupon.Coupon{Campaign: id, UserID: t.UserID, Entry: t.Number}, taken)
			var stale *coupon.StaleEntryError
			switch {
			case err == nil:
				outcomes = append(outcomes, coupon.Outcome{Number: t.Number, UserID: t.UserID, Code: c.Code})
				if w.cfg.OnLag != nil && t.Waited >= 0 {
					w.cfg.OnLag(id, t.Waited+time.Since(taken))
				}
			case errors.Is(err, coupon.ErrStockGone):
				outcomes = append(outcomes, coupon.Outcome{Number: t.Number, UserID: t.UserID})
			case errors.As(err, &stale):
				// The store made this entry after losing data and the database refused it: the
				// database's entries take its place (the store then drops it).
				w.repair(ctx, id, t.UserID, t.Number)
				lost = true
				continue
			default:
				// The database failed for longer than the lease allows retrying (or the worker
				// stops): the rest stays leased and is taken again when the lease runs out.
				return errors.Join(err, w.record(ctx, id, outcomes, &lost))
			}
			if w.cfg.OnIssued != nil {
				w.cfg.OnIssued(id, t)
			}
		}
		if err := w.record(ctx, id, outcomes, &lost); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// repair writes to the store what the database holds for the user and for the number (each
// if any): the store lost data.
func (w *Issuer) repair(ctx context.Context, id, userID string, number int64) {
	cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	var facts []coupon.Fact
	if e, err := w.cfg.DB.CouponEntryOf(cctx, id, userID); err == nil {
		facts = append(facts, coupon.Fact{UserKey: token.UserKey(userID), Entry: e.Entry()})
	}
	if e, err := w.cfg.DB.CouponEntryAt(cctx, id, number); err == nil && e.UserID != userID {
		facts = append(facts, coupon.Fact{UserKey: token.UserKey(e.UserID), Entry: e.Entry()})
	}
	if err := w.cfg.Store.RestoreEntries(cctx, id, facts); err != nil && !errors.Is(err, coupon.ErrCampaignNotFound) {
		w.cfg.Logger.Warn("restoring coupon entries to the store failed", "campaign", id, "err", err)
	}
}

// issueHeld writes one coupon of a batch taken at taken (monotonic), retrying a failure of
// the database (a stall, a restart, a failover) while the batch's lease leaves room for
// another call: the batch stays with this worker, in entry order, and is issued as soon as
// the database answers again. Giving up at once left the whole batch leased, so its entries
// waited out the lease (30 s) while entries after them, taken by other workers, were issued
// first (helper-70: a 5 s stall held ten entries 24 s behind three later ones). The waits
// double from 100 ms up to 2 s. ErrStockGone and StaleEntryError are answers, not failures,
// and ErrCampaignNotFound lasts: returned at once, as is the last failure when the lease is
// nearly out or ctx ends.
func (w *Issuer) issueHeld(ctx context.Context, c coupon.Coupon, taken time.Time) (coupon.Coupon, error) {
	wait := 100 * time.Millisecond
	for {
		c.Code = w.cfg.Codes() // an entry issued already gets its first coupon back
		got, err := w.issue(ctx, c)
		var stale *coupon.StaleEntryError
		if err == nil || errors.Is(err, coupon.ErrStockGone) || errors.As(err, &stale) ||
			errors.Is(err, coupon.ErrCampaignNotFound) {
			return got, err // answers, or a campaign deleted meanwhile: no retry changes them
		}
		if time.Since(taken)+wait+2*w.cfg.CallTimeout > w.cfg.Lease {
			return got, err
		}
		w.cfg.Logger.Warn("coupon issuance failed; retrying while the batch is leased", "campaign", c.Campaign,
			"entry", c.Entry, "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return got, err
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// issue writes one coupon. It runs on a context detached from the worker's (a Stop in the
// middle must not leave the commit's outcome unknown), bounded by CallTimeout.
func (w *Issuer) issue(ctx context.Context, c coupon.Coupon) (coupon.Coupon, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.CallTimeout)
	defer cancel()
	return w.cfg.DB.IssueCoupon(cctx, c)
}

// record tells the store the outcomes of coupons already in the database, bounded by
// CallTimeout. On failure the entries stay leased and are issued again (to the same coupon)
// when the lease runs out. An outcome the store refuses (the entry is not its user's: the store
// lost data) is repaired from the database, and *lost set.
func (w *Issuer) record(ctx context.Context, id string, outcomes []coupon.Outcome, lost *bool) error {
	cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	refused, err := w.cfg.Store.Record(cctx, id, outcomes)
	cancel()
	for _, o := range refused {
		w.repair(ctx, id, o.UserID, o.Number)
		*lost = true
	}
	return err
}
