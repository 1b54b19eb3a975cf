package app

import (
	"context"
	"fmt"

	"github.com/waitroom/waitroom/internal/booking"
	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/issuance"
	"github.com/waitroom/waitroom/internal/memstore"
	"github.com/waitroom/waitroom/internal/redisstore"
	"github.com/waitroom/waitroom/internal/sale"
	"github.com/waitroom/waitroom/internal/saleapi"
	"github.com/waitroom/waitroom/internal/token"
)

// newSale assembles the sale (holds, bookings, recovery) and the coupon campaigns on the same
// store as the line, and mounts their HTTP routes on the API.
func (a *App) newSale(identity *token.IdentityVerifier) error {
	var (
		sales   sale.Store
		coupons coupon.Store
	)
	switch s := a.Store.(type) {
	case *redisstore.Store:
		sales, coupons = s, s
	case *memstore.Store:
		sales, coupons = memstore.NewSales(s), memstore.NewCoupons(memstore.Config{})
	default:
		return fmt.Errorf("app: no sale store for a %T", a.Store)
	}
	var err error
	if a.Sales, err = booking.New(booking.Config{
		DB: a.DB, Store: sales, Events: a.Registry.List, Event: a.Registry.Get, EnsureLine: a.Registry.Restore,
		Logger: a.Log,
	}); err != nil {
		return err
	}
	if a.Coupons, err = issuance.New(issuance.Config{DB: a.DB, Store: coupons, Logger: a.Log}); err != nil {
		return err
	}
	return saleapi.Mount(saleapi.Config{API: a.API, Sales: a.Sales, Coupons: a.Coupons, Event: a.Registry.Get,
		Identity: identity, Logger: a.Log})
}

// startSale rebuilds the store's sold state from the database, then runs the sale's sync loop
// and this instance's coupon issuance worker. Call after the registry started.
func (a *App) startSale(ctx context.Context) error {
	if err := a.Sales.Start(ctx); err != nil {
		return fmt.Errorf("sale: %w", err)
	}
	if err := a.Coupons.Start(ctx); err != nil {
		return fmt.Errorf("coupons: %w", err)
	}
	return nil
}

// stopSale stops the sale's loops (safe when they never started).
func (a *App) stopSale() {
	if a.Coupons != nil {
		a.Coupons.Stop()
	}
	if a.Sales != nil {
		a.Sales.Stop()
	}
}
