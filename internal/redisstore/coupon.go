package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/queue"
)

var _ coupon.Store = (*Store)(nil)

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
	r := readReply(couponEnterScript.Exec(ctx, s.client, s.couponKeys(campaign), []string{s.nowArg(), userKey, userID}).ToArray())
	code := r.Code()
	var err error
	e := coupon.Entry{Campaign: campaign, UserID: userID}
	switch {
	case code == codeNotOpen:
		err = &coupon.NotOpenError{OpensAt: queue.FromMS(r.Int(1))}
	case code < 0:
		err = codeErr(campaign, code)
	default:
		e.Number = r.Int(1)
		outcome(&e, r.Str(2))
	}
	if rerr := r.Err(); rerr != nil {
		return coupon.Entry{}, false, fmt.Errorf("redisstore: enter: %w", rerr)
	}
	if err != nil {
		return coupon.Entry{}, false, err
	}
	return e, code == 1, nil
}

// Entry implements coupon.Store.
func (s *Store) Entry(ctx context.Context, campaign, userKey string) (coupon.Entry, error) {
	r := readReply(couponEntryScript.Exec(ctx, s.client, s.couponKeys(campaign), []string{s.nowArg(), userKey}).ToArray())
	if code := r.Code(); code < 0 && r.Err() == nil {
		return coupon.Entry{}, codeErr(campaign, code)
	}
	e := coupon.Entry{Campaign: campaign, Number: r.Int(0), UserID: r.Str(2)}
	outcome(&e, r.Str(1))
	if err := r.Err(); err != nil {
		return coupon.Entry{}, fmt.Errorf("redisstore: entry: %w", err)
	}
	return e, nil
}

// Take implements coupon.Store.
func (s *Store) Take(ctx context.Context, campaign string, n int, lease time.Duration) ([]coupon.Task, error) {
	r := readReply(couponTakeScript.Exec(ctx, s.client, s.couponKeys(campaign), []string{s.nowArg(),
		strconv.Itoa(n), strconv.FormatInt(lease.Milliseconds(), 10)}).ToArray())
	if r.Len() == 1 && r.Err() == nil {
		return nil, codeErr(campaign, r.Code())
	}
	tasks := make([]coupon.Task, 0, r.Len()/3)
	for i := 0; i+2 < r.Len(); i += 3 {
		tasks = append(tasks, coupon.Task{Number: r.Int(i), UserID: r.Str(i + 1), Waited: time.Duration(r.Int(i+2)) * time.Millisecond})
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("redisstore: take: %w", err)
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
	r := readReply(couponStatsScript.Exec(ctx, s.client, s.couponKeys(campaign), []string{s.nowArg()}).ToArray())
	if code := r.Code(); code < 0 && r.Len() == 1 && r.Err() == nil {
		return coupon.Stats{}, codeErr(campaign, code)
	}
	st := coupon.Stats{Stock: r.Int(0), Entries: r.Int(1), Issued: r.Int(2), Rejected: r.Int(3), Taken: r.Int(4), Now: queue.FromMS(r.Int(5))}
	if err := r.Err(); err != nil {
		return coupon.Stats{}, fmt.Errorf("redisstore: campaign stats: %w", err)
	}
	return st, nil
}
