// Package issuance is the coupon service of one instance: campaigns kept in SQL and written
// through to the coupon store, entries (written to SQL before they are answered), and the
// issuance worker that turns queued entries into coupons in the database (see package coupon
// for the domain and its guarantees, docs/durability.md for what survives a store's loss).
package issuance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/loop"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/store"
	"github.com/waitroom/waitroom/internal/token"
)

// Config configures a Service.
type Config struct {
	DB    *sqlstore.DB // required
	Store coupon.Store // required
	// Notifier carries wake-ups to the issuance workers of every instance. Required.
	Notifier store.Notifier
	// SyncInterval is how often the campaigns are reloaded from SQL, written to the store and
	// checked against it (a store that lost a campaign or entries is recovered). Defaults to 1 s.
	SyncInterval time.Duration
	// CallTimeout bounds each database or store call made on no client's behalf (entry writes,
	// block reservations, recoveries). Defaults to 5 s.
	CallTimeout time.Duration
	// Issuer tunes the worker (coupon.Store, DB and Campaigns are set by the service).
	Issuer IssuerConfig
	Logger *slog.Logger // defaults to slog.Default()
}

// Service is the coupon side of one instance: campaigns (SQL, written through to the store),
// entries, and this instance's issuance worker.
type Service struct {
	cfg     Config
	Issuer  *Issuer
	journal *Journal

	mu        sync.RWMutex
	campaigns map[string]coupon.CampaignRecord

	// flights merges concurrent block reservations and recoveries of one campaign.
	flights singleflight.Group
	// refilling holds the campaigns whose next block is being reserved ahead of need.
	refilling sync.Map // campaign id -> struct{}
	bg        sync.WaitGroup
	// recovered holds each campaign's recoveryMarks.
	recovered sync.Map // campaign id -> *recoveryMarks
	// Recoveries counts the campaigns recovered from the database (tests, logs).
	Recoveries atomic.Int64

	loop loop.Loop
}

// New returns a Service; Start runs its loops.
func New(cfg Config) (*Service, error) {
	if cfg.DB == nil || cfg.Store == nil || cfg.Notifier == nil {
		return nil, errors.New("issuance: Config.DB, Store and Notifier are required")
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 5 * time.Second
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	s := &Service{cfg: cfg, campaigns: map[string]coupon.CampaignRecord{}}
	s.journal = newJournal(cfg.DB, cfg.Store, cfg.CallTimeout, cfg.Logger)
	ic := cfg.Issuer
	ic.Store, ic.Notifier, ic.DB, ic.Campaigns = cfg.Store, cfg.Notifier, cfg.DB, s.IDs
	ic.Recover = func(ctx context.Context, id, why string) error { return s.recover(ctx, id, why) }
	ic.Logger = cmp.Or(ic.Logger, cfg.Logger)
	var err error
	if s.Issuer, err = NewIssuer(ic); err != nil {
		return nil, err
	}
	return s, nil
}

// IDs lists the ids of the campaigns (as of the last sync), sorted.
func (s *Service) IDs() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ids := make([]string, 0, len(s.campaigns))
	for id := range s.campaigns {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Put stores the campaign in SQL and writes it through to the store.
// Errors: coupon.ErrStockBelowIssued, or the database's or store's.
func (s *Service) Put(ctx context.Context, c coupon.Campaign) (stored coupon.CampaignRecord, created bool, err error) {
	if stored, created, err = s.cfg.DB.PutCampaign(ctx, c); err != nil {
		return stored, created, err
	}
	if err := s.put(ctx, stored); err != nil {
		return stored, created, err
	}
	return stored, created, nil
}

// put writes a campaign known to SQL to the store, recovering it if the store had lost it.
func (s *Service) put(ctx context.Context, c coupon.CampaignRecord) error {
	made, err := s.cfg.Store.PutCampaign(ctx, c.Campaign)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.campaigns[c.ID] = c
	s.mu.Unlock()
	if made && c.HasHistory() {
		return s.recover(ctx, c.ID, "the store had lost the campaign")
	}
	return nil
}

// Stats returns a campaign's figures: entries, issued and rejected from SQL, coupons taken by
// a worker from the store. Errors: coupon.ErrCampaignNotFound, or the database's or store's.
func (s *Service) Stats(ctx context.Context, id string) (coupon.Stats, error) {
	_, st, err := s.Get(ctx, id)
	return st, err
}

// Get returns a campaign as stored in SQL and its figures (see Stats).
// Errors: coupon.ErrCampaignNotFound, or the database's or store's.
func (s *Service) Get(ctx context.Context, id string) (coupon.CampaignRecord, coupon.Stats, error) {
	c, err := s.cfg.DB.GetCampaign(ctx, id)
	if err != nil {
		return c, coupon.Stats{}, err
	}
	cnt, err := s.cfg.Store.CampaignCounters(ctx, id)
	if errors.Is(err, coupon.ErrCampaignNotFound) {
		if err = s.put(ctx, c); err == nil {
			cnt, err = s.cfg.Store.CampaignCounters(ctx, id)
		}
	}
	if err != nil {
		return c, coupon.Stats{}, err
	}
	return c, coupon.Stats{Stock: c.Stock, Entries: c.Entries, Issued: c.Issued, Rejected: c.Rejected, Taken: cnt.Taken, Now: cnt.Now}, nil
}

// restore writes a campaign known to SQL to a store that lost it, and recovers it.
func (s *Service) restore(ctx context.Context, id string) error {
	c, err := s.cfg.DB.GetCampaign(ctx, id)
	if err != nil {
		return err
	}
	return s.put(ctx, c)
}

// whyServer is the reason logged for a recovery the store asked for (coupon.ErrNeedsRecovery).
const whyServer = "the campaign is on a Redis server it was not recovered on (a restart or a failover)"

// maxEnterRepairs bounds the store repairs one entry may go through before it is answered with
// an error: one of each kind an entry right after a loss of the store may meet in turn (the
// campaign to restore, its recovery, a block to reserve, a number the database holds for
// another user). The store is called once more than that: the call after the last repair.
const maxEnterRepairs = 4

// errRepairs is an entry that needed more than maxEnterRepairs repairs.
var errRepairs = errors.New("issuance: the coupon store kept needing repairs; retry")

// Enter enters the user (vouched for by the caller) into the campaign: a new entry is numbered
// by the store, written to SQL (only then is it answered) and queued, and the workers are
// woken; a repeat returns the existing entry with created false. A user the store lost gets
// the entry SQL holds back, at its number.
// Errors: coupon.ErrCampaignNotFound, *coupon.NotOpenError, or the database's or store's.
func (s *Service) Enter(ctx context.Context, campaign, userID string) (coupon.Entry, bool, error) {
	key := token.UserKey(userID)
	for range maxEnterRepairs + 1 {
		seen := s.marks(campaign).seen()
		r, err := s.cfg.Store.Enter(ctx, campaign, key, userID)
		var ce *coupon.CeilingError
		switch {
		case errors.Is(err, coupon.ErrCampaignNotFound):
			if err := s.restore(ctx, campaign); err != nil {
				return coupon.Entry{}, false, err
			}
			continue
		case errors.As(err, &ce):
			if err := s.reserve(ctx, campaign, ce); err != nil {
				return coupon.Entry{}, false, err
			}
			continue
		case errors.Is(err, coupon.ErrNeedsRecovery):
			if err := s.recover(ctx, campaign, whyServer); err != nil {
				return coupon.Entry{}, false, err
			}
			continue
		case err != nil:
			return coupon.Entry{}, false, err
		}
		if r.Refill > 0 {
			s.refill(campaign, r.Refill, r.Incarnation)
		}
		e, created := r.Entry, r.Created
		e.UserID = userID
		if e.Unconfirmed {
			held, ok, err := s.confirm(ctx, key, e, seen)
			if err != nil {
				return coupon.Entry{}, false, err
			}
			if !ok {
				continue // the number was another user's: numbered again, above the floor
			}
			if held.Number != e.Number {
				created = false // the user's entry from before the loss
			}
			e = held
		}
		if created && e.Status == coupon.StatusPending {
			if errs := s.cfg.Notifier.Publish(ctx, store.Message{Topic: store.CouponWakeTopic(), Body: campaign}); errs != nil {
				s.cfg.Logger.Warn("coupon wake-up failed; the sweep will issue", "campaign", campaign, "err", errs[0])
			}
		}
		return s.withCode(ctx, e), created, nil
	}
	return coupon.Entry{}, false, errRepairs
}

// confirm writes the store's unconfirmed entry e to SQL and returns the entry SQL holds for
// the user: e itself (confirmed), or the user's entry from before a loss (restored to the
// store). ok is false when SQL gives e's number to another user: the store handed it out again
// after a loss; the number is restored to its owner and the campaign recovered (this user
// holds no entry), unless a recovery was applied and completed since seen was read before the
// store call (see recoveryMarks).
func (s *Service) confirm(ctx context.Context, key string, e coupon.Entry, seen uint64) (_ coupon.Entry, ok bool, err error) {
	held, err := s.journal.Write(ctx, coupon.EntryRecord{Campaign: e.Campaign, UserID: e.UserID, Number: e.Number,
		Rejected: e.Status == coupon.StatusRejected}, key)
	if err != nil {
		return coupon.Entry{}, false, err
	}
	switch {
	case held.Number == e.Number:
		he := held.Entry()
		if e.Status != coupon.StatusPending && he.Status == coupon.StatusPending {
			he.Status, he.Code = e.Status, e.Code // decided in the store since (SQL has the coupon)
		}
		return he, true, nil
	case held.Number != 0:
		he := held.Entry()
		s.restoreFacts(ctx, e.Campaign, coupon.Fact{UserKey: key, Entry: he})
		s.recoverLater(e.Campaign, seen, "a user the store lost entered again")
		return he, true, nil
	}
	if owner, err := s.cfg.DB.CouponEntryAt(ctx, e.Campaign, e.Number); err == nil {
		s.restoreFacts(ctx, e.Campaign, coupon.Fact{UserKey: token.UserKey(owner.UserID), Entry: owner.Entry()})
	}
	if s.marks(e.Campaign).recoveredSince(seen) {
		return coupon.Entry{}, false, nil // numbered before the recovery that has put the store in order since
	}
	if err := s.recover(ctx, e.Campaign, "the store handed out a number the database holds for another user"); err != nil {
		return coupon.Entry{}, false, err
	}
	return coupon.Entry{}, false, nil
}

// restoreFacts writes entries as SQL holds them to the store; a failure is logged (the next
// read repairs again).
func (s *Service) restoreFacts(ctx context.Context, campaign string, facts ...coupon.Fact) {
	if err := s.cfg.Store.RestoreEntries(ctx, campaign, facts); err != nil && !errors.Is(err, coupon.ErrCampaignNotFound) {
		s.cfg.Logger.Warn("restoring coupon entries to the store failed", "campaign", campaign, "err", err)
	}
}

// Entry returns the user's entry. An entry the store does not know is read from SQL (and
// restored to the store); one the store has not confirmed is written to SQL first.
// Errors: coupon.ErrCampaignNotFound, coupon.ErrEntryNotFound, or the database's or store's.
func (s *Service) Entry(ctx context.Context, campaign, userID string) (coupon.Entry, error) {
	key := token.UserKey(userID)
	seen := s.marks(campaign).seen()
	e, err := s.cfg.Store.Entry(ctx, campaign, key, userID)
	switch {
	case err == nil && e.Unconfirmed:
		held, ok, err := s.confirm(ctx, key, e, seen)
		if err != nil {
			return coupon.Entry{}, err
		}
		if !ok {
			return coupon.Entry{}, coupon.ErrEntryNotFound
		}
		return s.withCode(ctx, held), nil
	case err == nil:
		return s.withCode(ctx, e), nil
	case !errors.Is(err, coupon.ErrEntryNotFound) && !errors.Is(err, coupon.ErrCampaignNotFound):
		return coupon.Entry{}, err
	}
	held, derr := s.cfg.DB.CouponEntryOf(ctx, campaign, userID)
	if errors.Is(derr, coupon.ErrEntryNotFound) {
		if errors.Is(err, coupon.ErrCampaignNotFound) {
			if _, gerr := s.cfg.DB.GetCampaign(ctx, campaign); gerr != nil {
				return coupon.Entry{}, err
			}
		}
		return coupon.Entry{}, coupon.ErrEntryNotFound
	}
	if derr != nil {
		return coupon.Entry{}, derr
	}
	// The store lost the entry: SQL answers, and the store gets it back.
	he := held.Entry()
	if errors.Is(err, coupon.ErrCampaignNotFound) {
		if rerr := s.restore(ctx, campaign); rerr != nil {
			s.cfg.Logger.Warn("restoring a lost coupon campaign failed", "campaign", campaign, "err", rerr)
		}
	} else if he.Status == coupon.StatusPending {
		s.recoverLater(campaign, seen, "the store lost a pending entry")
	}
	s.restoreFacts(ctx, campaign, coupon.Fact{UserKey: key, Entry: he})
	return he, nil
}

// withCode fills an issued entry's code from SQL when the store does not have it.
func (s *Service) withCode(ctx context.Context, e coupon.Entry) coupon.Entry {
	if e.Status == coupon.StatusIssued && e.Code == "" {
		if c, err := s.cfg.DB.GetCoupon(ctx, e.Campaign, e.UserID); err == nil {
			e.Code = c.Code
		}
	}
	return e
}

// reserveWaits are the pauses of reserve while another caller's block is on its way to the
// store (its reservation and raise take one commit and one round trip).
var reserveWaits = []time.Duration{5 * time.Millisecond, 15 * time.Millisecond, 40 * time.Millisecond}

// reserve answers a store out of numbers: it reserves the block right above the store's
// ceiling in SQL, if nobody did (another instance, or this one's refill), and raises the
// store's ceiling with it, so that blocks arrive in order and no number is skipped. When
// somebody did, it waits for that block to reach the store (reserveWaits); if it does not (its
// reserver died between the two steps, or the store lost data), it reserves a block above
// everything reserved and the store skips to it. Concurrent callers for a campaign share one
// reservation. It runs on a context of its own (bounded by CallTimeout), not on ctx.
func (s *Service) reserve(ctx context.Context, campaign string, ce *coupon.CeilingError) error {
	ch := s.flights.DoChan("reserve "+campaign, func() (any, error) {
		cctx, cancel := context.WithTimeout(context.Background(), s.cfg.CallTimeout)
		defer cancel()
		for _, wait := range reserveWaits {
			if ce.Seq != ce.Ceiling {
				break // a campaign from before the ceiling: above its count at once
			}
			hi, ok, err := s.cfg.DB.ExtendEntries(cctx, campaign, ce.Ceiling, coupon.BlockSize)
			if err != nil {
				return nil, err
			}
			if ok {
				_, err = s.cfg.Store.RaiseCeiling(cctx, campaign, coupon.Block{Incarnation: ce.Incarnation, Lo: ce.Ceiling, Hi: hi})
				return nil, err
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-cctx.Done():
				t.Stop()
				return nil, cctx.Err()
			}
			cnt, err := s.cfg.Store.CampaignCounters(cctx, campaign)
			if err != nil {
				return nil, err
			}
			if cnt.Ceiling > ce.Ceiling || cnt.Incarnation != ce.Incarnation {
				return nil, nil // the other block arrived (or the copy changed): enter again
			}
		}
		hi, err := s.cfg.DB.ReserveEntries(cctx, campaign, ce.Seq, coupon.BlockSize)
		if err != nil {
			return nil, err
		}
		_, err = s.cfg.Store.RaiseCeiling(cctx, campaign, coupon.Block{Incarnation: ce.Incarnation, Lo: hi - coupon.BlockSize, Hi: hi})
		return nil, err
	})
	select {
	case r := <-ch:
		return r.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// refill reserves the block right above the store's ceiling in the background (at most one
// per campaign at a time on this instance), so that entries do not wait for it; if another
// instance reserved first, nothing is reserved.
func (s *Service) refill(campaign string, ceiling int64, incarnation string) {
	if _, busy := s.refilling.LoadOrStore(campaign, struct{}{}); busy {
		return
	}
	s.bg.Go(func() {
		defer s.refilling.Delete(campaign)
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CallTimeout)
		defer cancel()
		hi, ok, err := s.cfg.DB.ExtendEntries(ctx, campaign, ceiling, coupon.BlockSize)
		if err == nil && ok {
			_, err = s.cfg.Store.RaiseCeiling(ctx, campaign, coupon.Block{Incarnation: incarnation, Lo: ceiling, Hi: hi})
		}
		if err != nil {
			s.cfg.Logger.Warn("reserving the next coupon entry numbers failed; an entry will when needed", "campaign", campaign, "err", err)
		}
	})
}

// recoverPage is how many pending entries one restore call carries.
const recoverPage = 500

// recover puts the store's copy of a campaign back in order from SQL after a loss: numbering
// moves above everything SQL reserved, the admitted count comes from SQL, and every pending
// entry SQL holds is restored at its number and queued, and every issued one with its code
// (rejected entries come back when read, or when the worker rejects them again).
// Idempotent; concurrent calls for a campaign share one run, on a context of its own.
func (s *Service) recover(ctx context.Context, campaign, why string) error {
	ch := s.flights.DoChan("recover "+campaign, func() (any, error) {
		cctx, cancel := context.WithTimeout(context.Background(), loop.DefaultStepTimeout)
		defer cancel()
		return nil, s.recoverNow(cctx, campaign, why)
	})
	select {
	case r := <-ch:
		return r.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recoveryMarks tell an entry numbered before a recovery from one numbered after it. A number
// the database holds for another user, or a user the store lost, calls for a recovery only
// when the store may have lost data since its last one. A number the lost copy handed out
// before a recovery is often seen in SQL after it (64 entrants of one instance did so one
// after another in a test); recovering again for it moved the numbering past the block
// reserved since (1,024 numbers skipped each time) and sent every entry under way back to
// reserve one, until entries ran out of repairs.
//
// An entry reads seen before its store call and skips the recovery when one was applied to the
// store after that and has completed. Skipping is never unsafe: SQL refuses a number given to
// two users whatever the store did, and a store that lost data again after that recovery
// makes the entry's next number conflict too, which then recovers (its seen is read after the
// recovery). The marks are this instance's: a recovery another instance ran is not known here,
// which only costs a recovery more.
type recoveryMarks struct {
	// applied counts the recoveries applied to the store (RecoverCampaign answered); done is
	// the last of them that completed (they run one at a time, in flights, so it is the
	// highest).
	applied, done atomic.Uint64
}

// marks returns the campaign's recoveryMarks.
func (s *Service) marks(campaign string) *recoveryMarks {
	if m, ok := s.recovered.Load(campaign); ok {
		return m.(*recoveryMarks)
	}
	m, _ := s.recovered.LoadOrStore(campaign, new(recoveryMarks))
	return m.(*recoveryMarks)
}

// seen is read right before a store call.
func (m *recoveryMarks) seen() uint64 { return m.applied.Load() }

// recoveredSince reports whether a recovery applied after seen was read has completed.
func (m *recoveryMarks) recoveredSince(seen uint64) bool { return m.done.Load() > seen }

// recoverLater runs recover in the background (a request need not wait for it), unless a
// recovery was applied and completed since seen was read (see recoveryMarks).
func (s *Service) recoverLater(campaign string, seen uint64, why string) {
	s.bg.Go(func() {
		if s.marks(campaign).recoveredSince(seen) {
			return
		}
		if err := s.recover(context.Background(), campaign, why); err != nil {
			s.cfg.Logger.Warn("coupon campaign recovery failed; the sync retries", "campaign", campaign, "err", err)
		}
	})
}

func (s *Service) recoverNow(ctx context.Context, campaign, why string) error {
	c, err := s.cfg.DB.GetCampaign(ctx, campaign)
	if err != nil {
		return err
	}
	r := coupon.Recovery{Floor: max(c.EntryCeiling, c.LastEntry), Admitted: c.Entries - c.Rejected}
	// The campaign's settings as SQL holds them first: a copy rolled back to before a change
	// of stock or opens_at would otherwise decide entries by the old ones (reject at once
	// under a stock since raised, admit before an opening since moved) until the next sync.
	_, err = s.cfg.Store.PutCampaign(ctx, c.Campaign)
	if err == nil {
		err = s.cfg.Store.RecoverCampaign(ctx, campaign, r)
	}
	if err != nil {
		return err
	}
	m := s.marks(campaign)
	id := m.applied.Add(1)
	pending, issued := 0, 0
	for after := int64(0); ; {
		page, err := s.cfg.DB.AdmittedEntries(ctx, campaign, after, recoverPage)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			break
		}
		facts := make([]coupon.Fact, len(page))
		for i, p := range page {
			facts[i] = coupon.Fact{UserKey: token.UserKey(p.UserID), Entry: p.Entry()}
		}
		if err := s.cfg.Store.RestoreEntries(ctx, campaign, facts); err != nil {
			return err
		}
		for _, p := range page {
			if p.Code == "" {
				pending++
			} else {
				issued++
			}
		}
		after = page[len(page)-1].Number
		if len(page) < recoverPage {
			break
		}
	}
	m.done.Store(id) // recoveries of a campaign run one at a time (flights)
	s.Recoveries.Add(1)
	s.cfg.Logger.Info("recovered a coupon campaign from the database", "campaign", campaign, "why", why, "floor", r.Floor,
		"admitted", r.Admitted, "pending_restored", pending, "issued_restored", issued)
	if pending > 0 {
		if errs := s.cfg.Notifier.Publish(ctx, store.Message{Topic: store.CouponWakeTopic(), Body: campaign}); errs != nil {
			s.cfg.Logger.Warn("coupon wake-up failed; the sweep will issue", "campaign", campaign, "err", errs[0])
		}
	}
	return nil
}

// Sync reloads the campaigns from SQL, writes each to the store, and recovers those the store
// lost (created anew) or whose numbering is behind the highest entry number SQL holds (an older
// copy: a failover to a replica missing the last writes, an older snapshot).
func (s *Service) Sync(ctx context.Context) error {
	all, err := s.cfg.DB.ListCampaigns(ctx)
	if err != nil {
		return err
	}
	fresh := make(map[string]coupon.CampaignRecord, len(all))
	var errs []error
	for _, c := range all {
		fresh[c.ID] = c
		made, err := s.cfg.Store.PutCampaign(ctx, c.Campaign)
		why := "the store had lost the campaign"
		if err == nil && !made && c.LastEntry > 0 {
			// SQL's figures were read first: every number it holds was handed out by the store
			// before, so a store that has not reached it lost entries.
			var cnt coupon.Counters
			if cnt, err = s.cfg.Store.CampaignCounters(ctx, c.ID); err == nil && cnt.Seq < c.LastEntry {
				why = fmt.Sprintf("the store's numbering (%d) is behind the database's (%d)", cnt.Seq, c.LastEntry)
				made = true
			}
		}
		if err == nil && made && c.HasHistory() {
			err = s.recover(ctx, c.ID, why)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("campaign %s: %w", c.ID, err))
		}
	}
	s.mu.Lock()
	s.campaigns = fresh
	s.mu.Unlock()
	return errors.Join(errs...)
}

// Start syncs once (bounded by loop.DefaultStepTimeout), starts the entry writers and the
// worker, then syncs every SyncInterval until Stop or ctx ends.
func (s *Service) Start(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, loop.DefaultStepTimeout)
	err := s.Sync(sctx)
	cancel()
	if err != nil {
		return fmt.Errorf("load campaigns: %w", err)
	}
	s.journal.Start()
	s.Issuer.Start(ctx)
	s.loop.Start(ctx, "campaign sync", s.cfg.SyncInterval, s.cfg.Logger, s.Sync)
	return nil
}

// Stop ends the loops, the worker and the entry writers (writing what they hold) and waits
// for them and for background reservations and recoveries. Safe before Start and more than
// once.
func (s *Service) Stop(context.Context) error {
	s.loop.Stop()
	s.Issuer.Stop()
	s.journal.Stop()
	s.bg.Wait()
	return nil
}
