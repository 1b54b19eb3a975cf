// Package issuance is the coupon service of one instance: campaigns kept in SQL and written
// through to the coupon store, entries, and the issuance worker that turns queued entries into
// coupons in the database (see package coupon for the domain and its guarantees).
package issuance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

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
	// SyncInterval is how often the campaigns are reloaded from SQL and written to the store
	// (a store that lost a campaign gets it back). Defaults to 1 s.
	SyncInterval time.Duration
	// Issuer tunes the worker (coupon.Store, DB and Campaigns are set by the service).
	Issuer IssuerConfig
	Logger *slog.Logger // defaults to slog.Default()
}

// Service is the coupon side of one instance: campaigns (SQL, written through to the store),
// entries, and this instance's issuance worker.
type Service struct {
	cfg    Config
	Issuer *Issuer

	mu        sync.RWMutex
	campaigns map[string]sqlstore.Campaign

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
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Service{cfg: cfg, campaigns: map[string]sqlstore.Campaign{}}
	ic := cfg.Issuer
	ic.Store, ic.Notifier, ic.DB, ic.Campaigns = cfg.Store, cfg.Notifier, cfg.DB, s.IDs
	if ic.Logger == nil {
		ic.Logger = cfg.Logger
	}
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

func storeCampaign(c sqlstore.Campaign) coupon.Campaign {
	return coupon.Campaign{ID: c.ID, Stock: c.Stock, OpensAt: c.OpensAt}
}

// Put stores the campaign in SQL and writes it through to the store.
// Errors: sqlstore.ErrStockBelowIssued, or the database's or store's.
func (s *Service) Put(ctx context.Context, c sqlstore.Campaign) (stored sqlstore.Campaign, created bool, err error) {
	if stored, created, err = s.cfg.DB.PutCampaign(ctx, c); err != nil {
		return stored, created, err
	}
	if err := s.cfg.Store.PutCampaign(ctx, storeCampaign(stored)); err != nil {
		return stored, created, err
	}
	s.mu.Lock()
	s.campaigns[stored.ID] = stored
	s.mu.Unlock()
	return stored, created, nil
}

// Get returns a campaign as stored in SQL and its live counters.
// Errors: coupon.ErrCampaignNotFound, or the database's or store's.
func (s *Service) Get(ctx context.Context, id string) (sqlstore.Campaign, coupon.Stats, error) {
	c, err := s.cfg.DB.GetCampaign(ctx, id)
	if errors.Is(err, sqlstore.ErrNotFound) {
		return c, coupon.Stats{}, fmt.Errorf("%w: %s", coupon.ErrCampaignNotFound, id)
	}
	if err != nil {
		return c, coupon.Stats{}, err
	}
	st, err := s.cfg.Store.CampaignStats(ctx, id)
	if errors.Is(err, coupon.ErrCampaignNotFound) {
		if err = s.restore(ctx, id); err == nil {
			st, err = s.cfg.Store.CampaignStats(ctx, id)
		}
	}
	return c, st, err
}

// restore writes a campaign known to SQL to a store that lost it.
func (s *Service) restore(ctx context.Context, id string) error {
	c, err := s.cfg.DB.GetCampaign(ctx, id)
	if errors.Is(err, sqlstore.ErrNotFound) {
		return fmt.Errorf("%w: %s", coupon.ErrCampaignNotFound, id)
	}
	if err != nil {
		return err
	}
	if err := s.cfg.Store.PutCampaign(ctx, storeCampaign(c)); err != nil {
		return err
	}
	s.mu.Lock()
	s.campaigns[id] = c
	s.mu.Unlock()
	return nil
}

// Enter enters the user (vouched for by the caller) into the campaign: a new entry is queued
// and the workers are woken; a repeat returns the existing entry with created false.
// Errors: coupon.ErrCampaignNotFound, *coupon.NotOpenError, or the store's.
func (s *Service) Enter(ctx context.Context, campaign, userID string) (coupon.Entry, bool, error) {
	key := token.UserKey(userID)
	e, created, err := s.cfg.Store.Enter(ctx, campaign, key, userID)
	if errors.Is(err, coupon.ErrCampaignNotFound) {
		if err = s.restore(ctx, campaign); err == nil {
			e, created, err = s.cfg.Store.Enter(ctx, campaign, key, userID)
		}
	}
	if err != nil {
		return coupon.Entry{}, false, err
	}
	e.UserID = userID
	if created && e.Status == coupon.StatusPending {
		if errs := s.cfg.Notifier.Publish(ctx, store.Message{Topic: store.CouponWakeTopic(), Body: campaign}); errs != nil {
			s.cfg.Logger.Warn("coupon wake-up failed; the sweep will issue", "campaign", campaign, "err", errs[0])
		}
	}
	return s.withCode(ctx, e), created, nil
}

// Entry returns the user's entry; an issued coupon the store lost is found in SQL.
// Errors: coupon.ErrCampaignNotFound, coupon.ErrEntryNotFound, or the store's.
func (s *Service) Entry(ctx context.Context, campaign, userID string) (coupon.Entry, error) {
	e, err := s.cfg.Store.Entry(ctx, campaign, token.UserKey(userID))
	if errors.Is(err, coupon.ErrEntryNotFound) || errors.Is(err, coupon.ErrCampaignNotFound) {
		c, derr := s.cfg.DB.GetCoupon(ctx, campaign, userID)
		if derr == nil {
			return coupon.Entry{Campaign: campaign, UserID: userID, Number: c.Entry, Status: coupon.StatusIssued, Code: c.Code}, nil
		}
		if errors.Is(err, coupon.ErrCampaignNotFound) {
			if _, gerr := s.cfg.DB.GetCampaign(ctx, campaign); gerr == nil {
				return coupon.Entry{}, coupon.ErrEntryNotFound
			}
		}
		return coupon.Entry{}, err
	}
	if err != nil {
		return coupon.Entry{}, err
	}
	e.UserID = userID
	return s.withCode(ctx, e), nil
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

// Sync reloads the campaigns from SQL and writes each to the store.
func (s *Service) Sync(ctx context.Context) error {
	all, err := s.cfg.DB.ListCampaigns(ctx)
	if err != nil {
		return err
	}
	fresh := make(map[string]sqlstore.Campaign, len(all))
	var errs []error
	for _, c := range all {
		fresh[c.ID] = c
		if err := s.cfg.Store.PutCampaign(ctx, storeCampaign(c)); err != nil {
			errs = append(errs, fmt.Errorf("campaign %s: %w", c.ID, err))
		}
	}
	s.mu.Lock()
	s.campaigns = fresh
	s.mu.Unlock()
	return errors.Join(errs...)
}

// Start syncs once (bounded by loop.DefaultStepTimeout), starts the worker, then syncs every
// SyncInterval until Stop or ctx ends.
func (s *Service) Start(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, loop.DefaultStepTimeout)
	err := s.Sync(sctx)
	cancel()
	if err != nil {
		return fmt.Errorf("load campaigns: %w", err)
	}
	s.Issuer.Start(ctx)
	s.loop.Start(ctx, "campaign sync", s.cfg.SyncInterval, s.cfg.Logger, s.Sync)
	return nil
}

// Stop ends the loops and the worker and waits for them. Safe before Start and more than once.
func (s *Service) Stop() {
	s.loop.Stop()
	s.Issuer.Stop()
}
