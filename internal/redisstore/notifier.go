package redisstore

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/store"
)

// Notifier is the store.Notifier on Redis Pub/Sub: plain PUBLISH/SUBSCRIBE on a standalone
// Redis, sharded SPUBLISH/SSUBSCRIBE on a Redis Cluster (an event's channel carries the
// event's hash tag, so it lives on the event's own shard and only the instances holding that
// event's connections receive it). Channels are named in keys.go.
type Notifier struct {
	client  rueidis.Client // publishes
	sub     rueidis.Client // subscribes: its own connections, so a dropped subscriber never fails a command
	prefix  string
	sharded bool
	log     *slog.Logger
}

var _ store.Notifier = (*Notifier)(nil)

// NewNotifier returns a Notifier that publishes on client and subscribes on sub (which may be
// client itself; Open gives it a client of its own).
func NewNotifier(client, sub rueidis.Client, prefix string, log *slog.Logger) *Notifier {
	if log == nil {
		log = slog.Default()
	}
	return &Notifier{client: client, sub: sub, prefix: prefix, sharded: client.Mode() == rueidis.ClientModeCluster, log: log}
}

func (n *Notifier) publishCmd(c rueidis.Client, m store.Message) rueidis.Completed {
	ch := Channel(n.prefix, m.Topic)
	if n.sharded && m.Topic.Kind == store.TopicEvent {
		return c.B().Spublish().Channel(ch).Message(m.Body).Build()
	}
	return c.B().Publish().Channel(ch).Message(m.Body).Build()
}

// Publish implements store.Notifier: the messages go out pipelined, in one round trip per
// kind (a cluster client refuses to mix sharded SPUBLISH and plain PUBLISH in one batch).
func (n *Notifier) Publish(ctx context.Context, msgs ...store.Message) []error {
	var errs []error
	var sharded, plain []int
	for i, m := range msgs {
		if n.sharded && m.Topic.Kind == store.TopicEvent {
			sharded = append(sharded, i)
		} else {
			plain = append(plain, i)
		}
	}
	for _, group := range [][]int{sharded, plain} {
		if len(group) == 0 {
			continue
		}
		cmds := make(rueidis.Commands, len(group))
		for j, i := range group {
			cmds[j] = n.publishCmd(n.client, msgs[i])
		}
		for j, res := range n.client.DoMulti(ctx, cmds...) {
			if err := res.Error(); err != nil {
				if errs == nil {
					errs = make([]error, len(msgs))
				}
				errs[group[j]] = err
			}
		}
	}
	return errs
}

// Subscribe implements store.Notifier. rueidis resubscribes on its own only while the
// connection lives; after a reconnect Receive returns and this loop subscribes again, backing
// off from 50 ms to 2 s while it keeps failing.
func (n *Notifier) Subscribe(ctx context.Context, topic store.Topic, onMessage func(string), onState func(bool)) {
	ch := Channel(n.prefix, topic)
	sharded := n.sharded && topic.Kind == store.TopicEvent
	sub := func() rueidis.Completed {
		if sharded {
			return n.sub.B().Ssubscribe().Channel(ch).Build()
		}
		return n.sub.B().Subscribe().Channel(ch).Build()
	}
	if onState == nil {
		onState = func(bool) {}
	}
	hctx := rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
		// Called on rueidis's reading goroutine: flags only, nothing that waits.
		switch s.Kind {
		case "subscribe", "ssubscribe":
			onState(true)
		case "unsubscribe", "sunsubscribe":
			onState(false)
		}
	})
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		err := n.sub.Receive(hctx, sub(), func(m rueidis.PubSubMessage) { onMessage(m.Message) })
		onState(false)
		if ctx.Err() != nil {
			break
		}
		if time.Since(start) > 10*time.Second {
			backoff = 50 * time.Millisecond
		}
		n.log.Warn("subscription ended; subscribing again", "channel", ch, "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	// A cancelled Receive leaves the connection subscribed on the server: unsubscribe it, so
	// Redis stops sending this instance the topic's messages.
	uctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var unsub rueidis.Completed
	if sharded {
		unsub = n.sub.B().Sunsubscribe().Channel(ch).Build()
	} else {
		unsub = n.sub.B().Unsubscribe().Channel(ch).Build()
	}
	_ = n.sub.Do(uctx, unsub).Error() // best effort: the client may be closing
}
