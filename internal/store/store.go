// Package store is the seam between the services and a backend: a Backend is one value with
// every part the services use — the line (queue.Store), the sale (sale.Store), the coupon
// campaigns (coupon.Store), the console's history (history.Store), the leases and the Notifier
// that carries hints between instances — built by
// memstore.NewBackend (the embedded deployment) or redisstore.Open (Redis, Redis Cluster).
// Both run the same conformance suites (package storetest); nothing above this seam knows
// which backend it has.
package store

import (
	"context"
	"time"

	"github.com/waitroom/waitroom/internal/autoadmit"
	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/history"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sale"
)

// Backend is one backend's parts. Line, Sale and Coupons work on the same data (a sale step
// ends the line's admitted sessions; a sell-out passes over the line).
type Backend struct {
	Line     queue.Store
	Sale     sale.Store
	Coupons  coupon.Store
	Notifier Notifier
	// Leases hands out leases shared by the instances (one holder at a time).
	Leases Leases
	// History keeps the recent samples, counters and heartbeats of the instances (the
	// operator console's figures, package history).
	History history.Store
	// Counters count per key in fixed windows shared by the instances (failed admin
	// authentications per client).
	Counters Counters
	// Shares count what clients hold open on all the instances (push connections per client
	// and event), each instance's share a lease it renews.
	Shares Shares
	// Auto keeps the signals and controller state of the events in admission mode auto
	// (package autoadmit).
	Auto autoadmit.Store
	// Ping reports whether the backend answers within ctx (readiness). Nil: always.
	Ping func(ctx context.Context) error
	// Close releases what the backend owns (connections it dialled). Nil: nothing.
	Close func() error
}

// Topic names a stream of hints. Topics are built by the functions below; a backend maps each
// to its own channel (see redisstore's key file).
type Topic struct {
	// Kind is TopicEvent or TopicCouponWake.
	Kind TopicKind
	// Event is the event id of a TopicEvent.
	Event string
}

// TopicKind is what a topic carries.
type TopicKind uint8

// Topic kinds.
const (
	// TopicEvent carries one event's push messages: admission batches and re-read hints
	// (package push). On Redis Cluster it lives on the event's own shard.
	TopicEvent TopicKind = iota + 1
	// TopicCouponWake wakes the coupon issuance workers of every instance (the body is the
	// campaign id).
	TopicCouponWake
)

// EventTopic is the topic of one event's push messages.
func EventTopic(event string) Topic { return Topic{Kind: TopicEvent, Event: event} }

// CouponWakeTopic is the topic that wakes the coupon issuance workers.
func CouponWakeTopic() Topic { return Topic{Kind: TopicCouponWake} }

// Message is one hint to publish.
type Message struct {
	Topic Topic
	Body  string
}

// Notifier carries hints between the instances sharing a backend (Redis Pub/Sub; in process
// for the embedded deployment). Messages are hints, never the truth: one may be lost (a
// reconnect, a slow subscriber dropped), so every receiver re-reads the state it cares about,
// and polling stays the fallback.
type Notifier interface {
	// Publish sends msgs to the subscribers of their topics on every instance, in one round
	// trip where the backend can. It returns one error per message (nil when sent), or nil
	// when every message was sent.
	Publish(ctx context.Context, msgs ...Message) []error
	// Subscribe delivers topic's messages to onMessage until ctx ends, then returns; it
	// subscribes again by itself whenever the subscription is lost. onState(true) is called
	// each time the subscription is confirmed — after the first time, messages published
	// meanwhile may have been lost — and onState(false) when it is lost. Both callbacks run on
	// the subscription's own goroutine and must not block (queue the work). onState may be nil.
	Subscribe(ctx context.Context, topic Topic, onMessage func(body string), onState func(subscribed bool))
}

// Leases hands out named leases among the instances sharing a backend: at most one holder of a
// name at a time, for as long as it renews before its ttl runs out. Used where exactly one
// instance must do something (report the shared gauges to Prometheus).
type Leases interface {
	// Lease takes the lease name for holder, or renews it when holder has it, for ttl; it
	// reports whether holder has it now.
	Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
}

// CountKey names a count of Counters or Shares: Name (a client's address) within Scope (what
// it counts: an event, "admin-auth"). On Redis, a Shares key lives under its Scope's hash tag
// (one event's counts on one Cluster slot), a Counters key under its Name's.
type CountKey struct {
	Scope, Name string
}

// Counters count per key in fixed windows aligned on the Unix epoch of the backend's clock,
// shared by the instances: a limit checked against them holds across instances.
type Counters interface {
	// Count adds n (>= 0; 0 only reads) to key's count in the current window of length window
	// (whole milliseconds, > 0) and returns the count after it and the time until the window
	// ends.
	Count(ctx context.Context, key CountKey, n int64, window time.Duration) (count int64, left time.Duration, err error)
}

// TakeParams is the input of Shares.TakeShare.
type TakeParams struct {
	Key CountKey
	// Holder names the instance (its share).
	Holder string
	// Held is the holder's own count of Key before this take (takes in flight aside): the
	// share is set from it when it lapsed (the holder could not renew it in time), instead of
	// starting again from one.
	Held int64
	// Limit is the most the shares of all holders may add up to (>= 1).
	Limit int64
	// TTL is how long the share lives unless renewed (whole milliseconds, > 0).
	TTL time.Duration
	// Once: each holder holds at most one share, so the shares count distinct holders (the
	// client addresses using one admission). A holder with a live share is let through and its
	// share lives TTL more, whatever the others hold; Held is ignored.
	Once bool
}

// Share is a holder's count of a key, for Shares.RenewShares.
type Share struct {
	Key CountKey
	N   int64
}

// Shares count what clients hold open on all the instances, such as push connections: each
// holder (an instance) owns a share of a key's count, a lease that lives its TTL unless
// renewed. A holder that dies stops counting within the TTL; one cut from the backend for
// longer than the TTL has its shares ignored meanwhile (the count is then looser, never
// stricter) and restores them at its next renewal.
type Shares interface {
	// TakeShare adds one to p.Holder's share of p.Key when the live shares of every holder add up
	// to less than p.Limit, and reports whether it did. The share then lives p.TTL.
	TakeShare(ctx context.Context, p TakeParams) (bool, error)
	// GiveShare takes one from holder's share of key (a share of none is dropped).
	GiveShare(ctx context.Context, key CountKey, holder string) error
	// RenewShares makes holder's shares live ttl more; a share that lapsed or is missing is set to
	// its N (N <= 0: dropped). Shares of one Scope are renewed together.
	RenewShares(ctx context.Context, holder string, shares []Share, ttl time.Duration) error
}
