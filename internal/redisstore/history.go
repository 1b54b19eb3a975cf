package redisstore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/history"
	"github.com/waitroom/waitroom/internal/queue"
)

var _ history.Store = (*Store)(nil)

// Append implements history.Store.
func (s *Store) Append(ctx context.Context, series string, at time.Time, data string, keep time.Duration) error {
	err := histAppendScript.Exec(ctx, s.client, []string{s.histKey(series)},
		[]string{strconv.FormatInt(at.UnixMilli(), 10), data, strconv.FormatInt(keep.Milliseconds(), 10)}).Error()
	if err != nil {
		return fmt.Errorf("redisstore: history append: %w", err)
	}
	return nil
}

// Range implements history.Store.
func (s *Store) Range(ctx context.Context, series string, since time.Time) ([]history.Entry, error) {
	cmd := s.client.B().Zrangebyscore().Key(s.histKey(series)).Min(strconv.FormatInt(since.UnixMilli(), 10)).Max("+inf").Build()
	members, err := s.client.Do(ctx, cmd).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: history range: %w", err)
	}
	out := make([]history.Entry, 0, len(members))
	for _, m := range members {
		ms, data, ok := strings.Cut(m, "|")
		n, err := strconv.ParseInt(ms, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("%w: history member %q", errShortReply, m)
		}
		out = append(out, history.Entry{At: queue.FromMS(n), Data: data})
	}
	return out, nil
}

// Add implements history.Store.
func (s *Store) Add(ctx context.Context, series string, deltas map[string]int64) error {
	if len(deltas) == 0 {
		return nil
	}
	args := make([]string, 0, 1+2*len(deltas))
	args = append(args, strconv.FormatInt(history.CountersTTL.Milliseconds(), 10))
	for k, d := range deltas {
		args = append(args, k, strconv.FormatInt(d, 10))
	}
	if err := histAddScript.Exec(ctx, s.client, []string{s.histKey(series) + ":n"}, args).Error(); err != nil {
		return fmt.Errorf("redisstore: history add: %w", err)
	}
	return nil
}

// Counters implements history.Store.
func (s *Store) Counters(ctx context.Context, series string) (map[string]int64, error) {
	m, err := s.client.Do(ctx, s.client.B().Hgetall().Key(s.histKey(series)+":n").Build()).AsIntMap()
	if err != nil {
		return nil, fmt.Errorf("redisstore: history counters: %w", err)
	}
	return m, nil
}

// Beat implements history.Store.
func (s *Store) Beat(ctx context.Context, id, info string, ttl time.Duration) ([]history.Instance, error) {
	r := readReply(beatScript.Exec(ctx, s.client, s.fleetKeys(),
		[]string{s.nowArg(), id, info, strconv.FormatInt(ttl.Milliseconds(), 10)}).ToArray())
	out := make([]history.Instance, 0, r.Len()/3)
	for i := 0; i+2 < r.Len(); i += 3 {
		out = append(out, history.Instance{ID: r.Str(i), Until: queue.FromMS(r.Int(i + 1)), Info: r.Str(i + 2)})
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("redisstore: beat: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
