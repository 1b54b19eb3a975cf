package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/store"
)

// The counts of the limits per client that hold across instances (store.Counters,
// store.Shares); see lua/count.lua and lua/share_*.lua.

var (
	_ store.Counters = (*Store)(nil)
	_ store.Shares   = (*Store)(nil)
)

// maxRenewKeys bounds the keys of one share_renew.lua call (longer lists go in several calls,
// pipelined), so that one call never holds Redis for long.
const maxRenewKeys = 256

// errBraces refuses a count key whose parts would break the hash tags.
var errBraces = errors.New("redisstore: count key parts must not hold { or }")

func checkCountKey(k store.CountKey) error {
	if strings.ContainsAny(k.Scope, "{}") || strings.ContainsAny(k.Name, "{}") {
		return errBraces
	}
	return nil
}

// counterKey is a Counters key (HASH w, n; lua/count.lua): prefix cnt:<scope>:{<name>}, under
// its name's hash tag, so that the counts of many clients spread over a Cluster.
func (s *Store) counterKey(k store.CountKey) string {
	return s.prefix + "cnt:" + k.Scope + ":{" + k.Name + "}"
}

// sharesKey is a Shares key (HASH holder -> count, x:holder -> lapse ms; lua/share_take.lua):
// prefix{<scope>}:sh:<name>, under its scope's hash tag (an event's), so that one call renews
// the shares of a scope.
func (s *Store) sharesKey(k store.CountKey) string {
	return s.prefix + "{" + k.Scope + "}:sh:" + k.Name
}

// Count implements store.Counters.
func (s *Store) Count(ctx context.Context, key store.CountKey, n int64, window time.Duration) (int64, time.Duration, error) {
	if err := checkCountKey(key); err != nil {
		return 0, 0, err
	}
	if window.Milliseconds() <= 0 || n < 0 {
		return 0, 0, fmt.Errorf("redisstore: count: window %s, n %d", window, n)
	}
	r := readReply(countScript.Exec(ctx, s.client, []string{s.counterKey(key)},
		[]string{s.nowArg(), strconv.FormatInt(n, 10), strconv.FormatInt(window.Milliseconds(), 10)}).ToArray())
	count, left := r.Code(), r.Int(1)
	if err := r.Err(); err != nil {
		return 0, 0, fmt.Errorf("redisstore: count: %w", err)
	}
	return count, time.Duration(left) * time.Millisecond, nil
}

// TakeShare implements store.Shares.
func (s *Store) TakeShare(ctx context.Context, p store.TakeParams) (bool, error) {
	if err := checkCountKey(p.Key); err != nil {
		return false, err
	}
	r := readReply(shareTakeScript.Exec(ctx, s.client, []string{s.sharesKey(p.Key)}, []string{
		s.nowArg(), p.Holder, strconv.FormatInt(max(p.Held, 0), 10), strconv.FormatInt(p.Limit, 10),
		strconv.FormatInt(max(p.TTL.Milliseconds(), 1), 10), onceArg(p.Once),
	}).ToArray())
	taken := r.Code() == 1
	if err := r.Err(); err != nil {
		return false, fmt.Errorf("redisstore: take: %w", err)
	}
	return taken, nil
}

// GiveShare implements store.Shares.
func (s *Store) GiveShare(ctx context.Context, key store.CountKey, holder string) error {
	if err := checkCountKey(key); err != nil {
		return err
	}
	r := readReply(shareGiveScript.Exec(ctx, s.client, []string{s.sharesKey(key)}, []string{holder}).ToArray())
	_ = r.Code() // checks the reply's shape
	if err := r.Err(); err != nil {
		return fmt.Errorf("redisstore: give: %w", err)
	}
	return nil
}

// RenewShares implements store.Shares: one share_renew.lua call per scope and maxRenewKeys keys,
// pipelined.
func (s *Store) RenewShares(ctx context.Context, holder string, shares []store.Share, ttl time.Duration) error {
	byScope := map[string][]store.Share{}
	for _, sh := range shares {
		if err := checkCountKey(sh.Key); err != nil {
			return err
		}
		byScope[sh.Key.Scope] = append(byScope[sh.Key.Scope], sh)
	}
	head := []string{s.nowArg(), holder, strconv.FormatInt(max(ttl.Milliseconds(), 1), 10)}
	var calls []rueidis.LuaExec
	for _, list := range byScope {
		for len(list) > 0 {
			part := list[:min(len(list), maxRenewKeys)]
			list = list[len(part):]
			keys := make([]string, len(part))
			args := append(make([]string, 0, len(head)+len(part)), head...)
			for i, sh := range part {
				keys[i] = s.sharesKey(sh.Key)
				args = append(args, strconv.FormatInt(sh.N, 10))
			}
			calls = append(calls, rueidis.LuaExec{Keys: keys, Args: args})
		}
	}
	for _, res := range shareRenewScript.ExecMulti(ctx, s.client, calls...) {
		if err := res.Error(); err != nil {
			return fmt.Errorf("redisstore: renew: %w", err)
		}
	}
	return nil
}

// onceArg is share_take.lua's ARGV[6].
func onceArg(once bool) string {
	if once {
		return "1"
	}
	return "0"
}
