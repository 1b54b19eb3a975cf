package memstore

import (
	"context"
	"sync"

	"github.com/waitroom/waitroom/internal/store"
)

// Notifier is the store.Notifier of one process: Publish calls the subscribers of the topic
// at once, on the publisher's goroutine (subscribers only queue work, as store.Notifier asks).
// Nothing is lost, and nothing crosses a process.
type Notifier struct {
	mu   sync.RWMutex
	subs map[store.Topic]map[*func(string)]struct{}
}

var _ store.Notifier = (*Notifier)(nil)

// NewNotifier returns a Notifier without subscribers.
func NewNotifier() *Notifier {
	return &Notifier{subs: map[store.Topic]map[*func(string)]struct{}{}}
}

// Publish implements store.Notifier; it never fails.
func (n *Notifier) Publish(_ context.Context, msgs ...store.Message) []error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	for _, m := range msgs {
		for f := range n.subs[m.Topic] {
			(*f)(m.Body)
		}
	}
	return nil
}

// Subscribe implements store.Notifier.
func (n *Notifier) Subscribe(ctx context.Context, topic store.Topic, onMessage func(string), onState func(bool)) {
	f := &onMessage
	n.mu.Lock()
	if n.subs[topic] == nil {
		n.subs[topic] = map[*func(string)]struct{}{}
	}
	n.subs[topic][f] = struct{}{}
	n.mu.Unlock()
	if onState != nil {
		onState(true)
	}
	<-ctx.Done()
	n.mu.Lock()
	delete(n.subs[topic], f)
	if len(n.subs[topic]) == 0 {
		delete(n.subs, topic)
	}
	n.mu.Unlock()
	if onState != nil {
		onState(false)
	}
}
