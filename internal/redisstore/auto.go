package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/autoadmit"
)

var _ autoadmit.Store = (*Store)(nil)

var setControlScript = rueidis.NewLuaScript(source("set_control"))

// autoKeys are an event's keys of admission mode auto, under the event's hash tag:
//
//	prefix{event}:sig   HASH   signal counters (autoadmit's counter names) -> running total
//	prefix{event}:ctl   HASH   the controller's state: seq, data (JSON)
func (s *Store) autoKeys(event string) (sig, ctl string) {
	base := s.prefix + "{" + event + "}"
	return base + ":sig", base + ":ctl"
}

// AddSignals implements autoadmit.Store: HINCRBY of each delta and PEXPIRE, in one MULTI-less
// script (hist_add.lua does exactly that).
func (s *Store) AddSignals(ctx context.Context, event string, deltas map[string]int64) error {
	if len(deltas) == 0 {
		return nil
	}
	sig, _ := s.autoKeys(event)
	args := make([]string, 0, 1+2*len(deltas))
	args = append(args, strconv.FormatInt(autoadmit.SignalsTTL.Milliseconds(), 10))
	for k, d := range deltas {
		args = append(args, k, strconv.FormatInt(d, 10))
	}
	if err := histAddScript.Exec(ctx, s.client, []string{sig}, args).Error(); err != nil {
		return fmt.Errorf("redisstore: add signals: %w", err)
	}
	return nil
}

// Signals implements autoadmit.Store.
func (s *Store) Signals(ctx context.Context, event string) (map[string]int64, error) {
	sig, _ := s.autoKeys(event)
	m, err := s.client.Do(ctx, s.client.B().Hgetall().Key(sig).Build()).AsIntMap()
	if err != nil {
		return nil, fmt.Errorf("redisstore: signals: %w", err)
	}
	return m, nil
}

// Control implements autoadmit.Store.
func (s *Store) Control(ctx context.Context, event string) (string, int64, error) {
	_, ctl := s.autoKeys(event)
	v, err := s.client.Do(ctx, s.client.B().Hmget().Key(ctl).Field("seq", "data").Build()).ToArray()
	if err != nil {
		return "", 0, fmt.Errorf("redisstore: control: %w", err)
	}
	if len(v) != 2 || v[0].IsNil() {
		return "", 0, nil
	}
	seq, err := v[0].AsInt64()
	if err != nil {
		return "", 0, fmt.Errorf("redisstore: control seq: %w", err)
	}
	data, err := v[1].ToString()
	if err != nil {
		return "", 0, fmt.Errorf("redisstore: control data: %w", err)
	}
	return data, seq, nil
}

// SetControl implements autoadmit.Store (lua/set_control.lua).
func (s *Store) SetControl(ctx context.Context, event string, seq int64, data string, maxActive int64, admitRate float64) (bool, error) {
	_, ctl := s.autoKeys(event)
	r := readReply(setControlScript.Exec(ctx, s.client, []string{s.keys(event)[0], ctl}, []string{
		strconv.FormatInt(seq, 10), data, strconv.FormatInt(maxActive, 10),
		strconv.FormatFloat(admitRate, 'f', -1, 64), strconv.FormatInt(autoadmit.SignalsTTL.Milliseconds(), 10),
	}).ToArray())
	wrote := r.Code() == 1
	if err := r.Err(); err != nil {
		return false, fmt.Errorf("redisstore: set control: %w", err)
	}
	return wrote, nil
}
