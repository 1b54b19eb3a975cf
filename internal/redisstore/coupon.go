package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/queue"
)

// loadCouponScript returns a coupon script: coupon_common.lua, then the script.
func loadCouponScript(name string) *rueidis.Lua {
	common, err := luaFS.ReadFile("lua/coupon_common.lua")
	if err != nil {
		panic(err)
	}
	body, err := luaFS.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	return rueidis.NewLuaScript(string(common) + "\n" + string(body))
}

var (
	couponPutScript    = loadCouponScript("coupon_put")
	couponEnterScript  = loadCouponScript("coupon_enter")
	couponEntryScript  = loadCouponScript("coupon_entry")
	couponTakeScript   = loadCouponScript("coupon_take")
	couponRecordScript = loadCouponScript("coupon_record")
	couponStatsScript  = loadCouponScript("coupon_stats")
)

var _ coupon.Store = (*Store)(nil)

// wakeChannel is the Pub/Sub channel of coupon wake-ups (message = campaign id).
func (s *Store) wakeChannel() string { return s.prefix + "coupons:wake" }

// outcome reads a res value: ” pending, 'R' rejected, 'I<code>' issued.
func outcome(e *coupon.Entry, res string) {
	switch {
	case res == "":
		e.Status = coupon.StatusPending
	case res == "R":
		e.Status = coupon.StatusRejected
	default:
		e.Status, e.Code = coupon.StatusIssued, strings.TrimPrefix(res, "I")
	}
}

// PutCampaign implements coupon.Store.
func (s *Store) PutCampaign(ctx context.Context, c coupon.Campaign) error {
	err := couponPutScript.Exec(ctx, s.client, s.couponKeys(c.ID), []string{s.nowArg(),
		strconv.FormatInt(c.Stock, 10), msOrZero(c.OpensAt)}).Error()
	if err != nil {
		return fmt.Errorf("redisstore: put campaign: %w", err)
	}
	return nil
}

// DeleteCampaign implements coupon.Store.
func (s *Store) DeleteCampaign(ctx context.Context, id string) error {
	if err := s.client.Do(ctx, s.client.B().Del().Key(s.couponKeys(id)...).Build()).Error(); err != nil {
		return fmt.Errorf("redisstore: delete campaign: %w", err)
	}
	return nil
}

// Enter implements coupon.Store.
func (s *Store) Enter(ctx context.Context, campaign, userKey, userID string) (coupon.Entry, bool, error) {
	v, err := couponEnterScript.Exec(ctx, s.client, s.couponKeys(campaign), []string{s.nowArg(), userKey, userID}).ToArray()
	if err != nil {
		return coupon.Entry{}, false, fmt.Errorf("redisstore: enter: %w", err)
	}
	code, _ := v[0].AsInt64()
	switch code {
	case -1:
		return coupon.Entry{}, false, fmt.Errorf("%w: %s", coupon.ErrCampaignNotFound, campaign)
	case -2:
		opens, _ := v[1].AsInt64()
		return coupon.Entry{}, false, &coupon.NotOpenError{OpensAt: queue.FromMS(opens)}
	}
	e := coupon.Entry{Campaign: campaign, UserID: userID}
	e.Number, _ = v[1].AsInt64()
	res, _ := v[2].ToString()
	outcome(&e, res)
	return e, code == 1, nil
}

// Entry implements coupon.Store.
func (s *Store) Entry(ctx context.Context, campaign, userKey string) (coupon.Entry, error) {
	v, err := couponEntryScript.Exec(ctx, s.client, s.couponKeys(campaign), []string{s.nowArg(), userKey}).ToArray()
	if err != nil {
		return coupon.Entry{}, fmt.Errorf("redisstore: entry: %w", err)
	}
	switch code, _ := v[0].AsInt64(); code {
	case -1:
		return coupon.Entry{}, fmt.Errorf("%w: %s", coupon.ErrCampaignNotFound, campaign)
	case -3:
		return coupon.Entry{}, coupon.ErrEntryNotFound
	}
	e := coupon.Entry{Campaign: campaign}
	e.Number, _ = v[0].AsInt64()
	res, _ := v[1].ToString()
	e.UserID, _ = v[2].ToString()
	outcome(&e, res)
	return e, nil
}

// Take implements coupon.Store.
func (s *Store) Take(ctx context.Context, campaign string, n int, lease time.Duration) ([]coupon.Task, error) {
	v, err := couponTakeScript.Exec(ctx, s.client, s.couponKeys(campaign), []string{s.nowArg(),
		strconv.Itoa(n), strconv.FormatInt(lease.Milliseconds(), 10)}).ToArray()
	if err != nil {
		return nil, fmt.Errorf("redisstore: take: %w", err)
	}
	if len(v) == 1 {
		if code, _ := v[0].AsInt64(); code == -1 {
			return nil, fmt.Errorf("%w: %s", coupon.ErrCampaignNotFound, campaign)
		}
	}
	tasks := make([]coupon.Task, 0, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		var t coupon.Task
		t.Number, _ = v[i].AsInt64()
		t.UserID, _ = v[i+1].ToString()
		tasks = append(tasks, t)
	}
	return tasks, nil
}

// Record implements coupon.Store.
func (s *Store) Record(ctx context.Context, campaign string, outcomes []coupon.Outcome) error {
	if len(outcomes) == 0 {
		return nil
	}
	args := make([]string, 0, 1+2*len(outcomes))
	args = append(args, s.nowArg())
	for _, o := range outcomes {
		res := "R"
		if o.Code != "" {
			res = "I" + o.Code
		}
		args = append(args, strconv.FormatInt(o.Number, 10), res)
	}
	if err := couponRecordScript.Exec(ctx, s.client, s.couponKeys(campaign), args).Error(); err != nil {
		return fmt.Errorf("redisstore: record: %w", err)
	}
	return nil
}

// CampaignStats implements coupon.Store.
func (s *Store) CampaignStats(ctx context.Context, campaign string) (coupon.Stats, error) {
	v, err := couponStatsScript.Exec(ctx, s.client, s.couponKeys(campaign), []string{s.nowArg()}).ToArray()
	if err != nil {
		return coupon.Stats{}, fmt.Errorf("redisstore: campaign stats: %w", err)
	}
	n := int64s(v)
	if len(n) == 1 && n[0] == -1 {
		return coupon.Stats{}, fmt.Errorf("%w: %s", coupon.ErrCampaignNotFound, campaign)
	}
	return coupon.Stats{Stock: n[0], Entries: n[1], Issued: n[2], Rejected: n[3], Taken: n[4]}, nil
}

// Wake implements coupon.Store: one PUBLISH (Pub/Sub is fire-and-forget; the workers' periodic
// sweep covers a lost message).
func (s *Store) Wake(ctx context.Context, campaign string) error {
	return s.client.Do(ctx, s.client.B().Publish().Channel(s.wakeChannel()).Message(campaign).Build()).Error()
}

// Wakes implements coupon.Store.
func (s *Store) Wakes(ctx context.Context, fn func(campaign string)) error {
	err := s.client.Receive(ctx, s.client.B().Subscribe().Channel(s.wakeChannel()).Build(), func(m rueidis.PubSubMessage) {
		fn(m.Message)
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}
