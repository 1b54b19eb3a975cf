package redisstore

import (
	"context"
	"crypto/rand"
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

// resValue is the res value of an entry's status (outcome's inverse): "" while pending.
func resValue(e coupon.Entry) string {
	switch e.Status {
	case coupon.StatusIssued:
		return "I" + e.Code
	case coupon.StatusRejected:
		return "R"
	}
	return ""
}

// PutCampaign implements coupon.Store.
func (s *Store) PutCampaign(ctx context.Context, c coupon.Campaign) (bool, error) {
	r := readReply(couponPutScript.Exec(ctx, s.client, s.couponKeys(c.ID), []string{s.nowArg(),
		strconv.FormatInt(c.Stock, 10), msOrZero(c.OpensAt), rand.Text()}).ToArray())
	created := r.Int(0) == 1
	if err := r.Err(); err != nil {
		return false, fmt.Errorf("redisstore: put campaign: %w", err)
	}
	return created, nil
}

// DeleteCampaign implements coupon.Store.
func (s *Store) DeleteCampaign(ctx context.Context, id string) error {
	if err := s.client.Do(ctx, s.client.B().Del().Key(s.couponKeys(id)...).Build()).Error(); err != nil {
		return fmt.Errorf("redisstore: delete campaign: %w", err)
	}
	return nil
}

// blockArg is coupon.BlockSize as a script argument.
var blockArg = strconv.Itoa(coupon.BlockSize)

// dialCount is the number of dials of the client (Config.Dials), 0 without a counter.
func (s *Store) dialCount() uint64 {
	if s.dur.dials == nil {
		return 0
	}
	return s.dur.dials.Load()
}

// couponGuard makes sure a campaign is on the Redis server it was created or last recovered on
// before its numbers are used (as guard does for lines): once per campaign per dial of this
// instance (a restart or a failover always means new connections; one sync.Map read
// otherwise). Errors: coupon.ErrNeedsRecovery (another server), or Redis's.
func (s *Store) couponGuard(ctx context.Context, campaign string) error {
	dials := s.dialCount()
	if v, ok := s.dur.campaigns.Load(campaign); ok && v.(uint64) == dials {
		return nil
	}
	r := readReply(couponCheckScript.Exec(ctx, s.client, s.couponKeys(campaign), []string{s.nowArg()}).ToArray())
	code := r.Code()
	if err := r.Err(); err != nil {
		return fmt.Errorf("redisstore: check campaign: %w", err)
	}
	switch code {
	case 0:
		s.dur.campaigns.Store(campaign, dials)
	case 1:
		return fmt.Errorf("%w: %s", coupon.ErrNeedsRecovery, campaign)
	}
	return nil // not found: the caller's script says so
}

// Enter implements coupon.Store.
func (s *Store) Enter(ctx context.Context, campaign, userKey, userID string) (coupon.EnterResult, error) {
	if err := s.couponGuard(ctx, campaign); err != nil {
		return coupon.EnterResult{}, err
	}
	r := readReply(couponEnterScript.Exec(ctx, s.client, s.couponKeys(campaign), []string{s.nowArg(), userKey, userID, blockArg}).ToArray())
	code := r.Code()
	var err error
	res := coupon.EnterResult{Entry: coupon.Entry{Campaign: campaign, UserID: userID}}
	switch {
	case code == codeNotOpen:
		err = &coupon.NotOpenError{OpensAt: queue.FromMS(r.Int(1))}
	case code == codeNeedCeiling:
		err = &coupon.CeilingError{Seq: r.Int(1), Incarnation: r.Str(2), Ceiling: r.Int(3)}
	case code < 0:
		err = codeErr(campaign, code)
	default:
		res.Created = code == 1
		res.Entry.Number = r.Int(1)
		outcome(&res.Entry, r.Str(2))
		res.Entry.Unconfirmed = r.Int(3) == 1
		if r.Len() > 4 {
			res.Refill, res.Incarnation = r.Int(4), r.Str(5)
		}
	}
	if rerr := r.Err(); rerr != nil {
		return coupon.EnterResult{}, fmt.Errorf("redisstore: enter: %w", rerr)
	}
	if err != nil {
		return coupon.EnterResult{}, err
	}
	return res, nil
}

// Entry implements coupon.Store.
func (s *Store) Entry(ctx context.Context, campaign, userKey, userID string) (coupon.Entry, error) {
	r := readReply(couponEntryScript.Exec(ctx, s.client, s.couponKeys(campaign), []string{s.nowArg(), userKey, userID}).ToArray())
	if code := r.Code(); code < 0 && r.Err() == nil {
		return coupon.Entry{}, codeErr(campaign, code)
	}
	e := coupon.Entry{Campaign: campaign, Number: r.Int(0), UserID: userID, Unconfirmed: r.Int(2) == 1}
	outcome(&e, r.Str(1))
	if err := r.Err(); err != nil {
		return coupon.Entry{}, fmt.Errorf("redisstore: entry: %w", err)
	}
	return e, nil
}

// RaiseCeiling implements coupon.Store.
func (s *Store) RaiseCeiling(ctx context.Context, campaign string, b coupon.Block) (bool, error) {
	r := readReply(couponRaiseScript.Exec(ctx, s.client, s.couponKeys(campaign), []string{s.nowArg(), b.Incarnation,
		strconv.FormatInt(b.Lo, 10), strconv.FormatInt(b.Hi, 10)}).ToArray())
	code := r.Code()
	if err := r.Err(); err != nil {
		return false, fmt.Errorf("redisstore: raise: %w", err)
	}
	if code < 0 {
		return false, codeErr(campaign, code)
	}
	return code == 1, nil
}

// RecoverCampaign implements coupon.Store.
func (s *Store) RecoverCampaign(ctx context.Context, campaign string, rc coupon.Recovery) error {
	dials := s.dialCount()
	r := readReply(couponRecoverScript.Exec(ctx, s.client, s.couponKeys(campaign), []string{s.nowArg(),
		strconv.FormatInt(rc.Floor, 10), strconv.FormatInt(rc.Admitted, 10)}).ToArray())
	code := r.Code()
	if err := r.Err(); err != nil {
		return fmt.Errorf("redisstore: recover: %w", err)
	}
	if code < 0 {
		return codeErr(campaign, code)
	}
	s.dur.campaigns.Store(campaign, dials)
	return nil
}

// RestoreEntries implements coupon.Store.
func (s *Store) RestoreEntries(ctx context.Context, campaign string, facts []coupon.Fact) error {
	if len(facts) == 0 {
		return nil
	}
	args := make([]string, 0, 1+4*len(facts))
	args = append(args, s.nowArg())
	for _, f := range facts {
		args = append(args, strconv.FormatInt(f.Entry.Number, 10), f.UserKey, f.Entry.UserID, resValue(f.Entry))
	}
	r := readReply(couponRestoreScript.Exec(ctx, s.client, s.couponKeys(campaign), args).ToArray())
	code := r.Code()
	if err := r.Err(); err != nil {
		return fmt.Errorf("redisstore: restore: %w", err)
	}
	return codeErr(campaign, code)
}

// ConfirmEntries implements coupon.Store.
func (s *Store) ConfirmEntries(ctx context.Context, campaign string, facts []coupon.Fact) error {
	if len(facts) == 0 {
		return nil
	}
	args := make([]string, 0, 1+2*len(facts))
	args = append(args, s.nowArg())
	for _, f := range facts {
		args = append(args, f.UserKey, strconv.FormatInt(f.Entry.Number, 10))
	}
	if err := couponConfirmScript.Exec(ctx, s.client, s.couponKeys(campaign), args).Error(); err != nil {
		return fmt.Errorf("redisstore: confirm: %w", err)
	}
	return nil
}

// Take implements coupon.Store.
func (s *Store) Take(ctx context.Context, campaign string, n int, lease time.Duration) ([]coupon.Task, error) {
	if err := s.couponGuard(ctx, campaign); err != nil {
		return nil, err
	}
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
func (s *Store) Record(ctx context.Context, campaign string, outcomes []coupon.Outcome) ([]coupon.Outcome, error) {
	if len(outcomes) == 0 {
		return nil, nil
	}
	args := make([]string, 0, 1+3*len(outcomes))
	args = append(args, s.nowArg())
	for _, o := range outcomes {
		res := "R"
		if o.Code != "" {
			res = "I" + o.Code
		}
		args = append(args, strconv.FormatInt(o.Number, 10), o.UserID, res)
	}
	r := readReply(couponRecordScript.Exec(ctx, s.client, s.couponKeys(campaign), args).ToArray())
	var refused []coupon.Outcome
	for i := range r.Len() {
		n := r.Int(i)
		for _, o := range outcomes {
			if o.Number == n {
				refused = append(refused, o)
				break
			}
		}
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("redisstore: record: %w", err)
	}
	return refused, nil
}

// CampaignCounters implements coupon.Store.
func (s *Store) CampaignCounters(ctx context.Context, campaign string) (coupon.Counters, error) {
	r := readReply(couponStatsScript.Exec(ctx, s.client, s.couponKeys(campaign), []string{s.nowArg()}).ToArray())
	if code := r.Code(); code < 0 && r.Len() == 1 && r.Err() == nil {
		return coupon.Counters{}, codeErr(campaign, code)
	}
	c := coupon.Counters{Stock: r.Int(0), Seq: r.Int(1), Ceiling: r.Int(2), Admitted: r.Int(3), Queued: r.Int(4),
		Taken: r.Int(5), Incarnation: r.Str(6), Now: queue.FromMS(r.Int(7))}
	if err := r.Err(); err != nil {
		return coupon.Counters{}, fmt.Errorf("redisstore: campaign counters: %w", err)
	}
	return c, nil
}
