package issuance

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/sqlstore"
)

// journalFlushers is how many batches of entries are written to the database at once: one
// batch commits while the next fills, so that under load each transaction carries many entries
// (a group commit) and when quiet an entry waits for one commit only.
const journalFlushers = 4

// Journal writes entries to the database before they are answered (the database is the
// truth of entries: docs/durability.md), many entries to a transaction, and then confirms them
// in the coupon store. Start runs its writers; before Start and after Stop, Write writes alone.
type Journal struct {
	db      *sqlstore.DB
	store   coupon.Store
	timeout time.Duration
	log     *slog.Logger

	reqs     chan *journalReq
	mu       sync.RWMutex // guards running: Write's send vs Stop
	running  bool
	stopOnce sync.Once
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

type journalReq struct {
	entry coupon.EntryRecord
	key   string // token.UserKey(entry.UserID), for the confirmation
	done  chan journalRes
}

type journalRes struct {
	held coupon.EntryRecord
	err  error
}

func newJournal(db *sqlstore.DB, store coupon.Store, timeout time.Duration, log *slog.Logger) *Journal {
	return &Journal{db: db, store: store, timeout: timeout, log: log, reqs: make(chan *journalReq, sqlstore.MaxJournalBatch)}
}

// Write writes the entry e (Campaign, UserID, Number, Rejected; key is its user key) and
// returns what the database holds for that user (see sqlstore.JournalEntries: the same
// number, another number, or Number 0 when the number is another user's). The write runs on
// the writers' context, bounded by the call timeout, not on ctx: ctx ending only stops the wait.
// Errors: ctx's, or the database's.
func (j *Journal) Write(ctx context.Context, e coupon.EntryRecord, key string) (coupon.EntryRecord, error) {
	r := &journalReq{entry: e, key: key, done: make(chan journalRes, 1)}
	j.mu.RLock() // held across the send: Stop drains only after it
	if !j.running {
		j.mu.RUnlock()
		j.flush([]*journalReq{r})
	} else {
		select {
		case j.reqs <- r:
			j.mu.RUnlock()
		case <-ctx.Done():
			j.mu.RUnlock()
			return coupon.EntryRecord{}, ctx.Err()
		}
	}
	select {
	case res := <-r.done:
		return res.held, res.err
	case <-ctx.Done():
		return coupon.EntryRecord{}, ctx.Err()
	}
}

// Start runs the writers until Stop.
func (j *Journal) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	j.mu.Lock()
	j.running, j.cancel = true, cancel
	j.mu.Unlock()
	for range journalFlushers {
		j.wg.Go(func() { j.run(ctx) })
	}
}

// Stop writes what is queued and ends the writers. Safe before Start and more than once.
func (j *Journal) Stop() {
	j.stopOnce.Do(func() {
		j.mu.Lock()
		j.running = false
		cancel := j.cancel
		j.mu.Unlock()
		if cancel != nil {
			cancel()
			j.wg.Wait()
		}
		// Requests sent just before running turned false.
		for {
			select {
			case r := <-j.reqs:
				j.flush([]*journalReq{r})
			default:
				return
			}
		}
	})
}

func (j *Journal) run(ctx context.Context) {
	for {
		var first *journalReq
		select {
		case first = <-j.reqs:
		case <-ctx.Done():
			return
		}
		batch := []*journalReq{first}
	fill:
		for len(batch) < sqlstore.MaxJournalBatch {
			select {
			case r := <-j.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		j.flush(batch)
	}
}

// flush writes a batch, answers each request, then confirms in the store the entries the
// database holds as written (a failed confirmation is harmless: the entry stays unconfirmed
// and is written again, to no effect, when next read).
func (j *Journal) flush(batch []*journalReq) {
	ctx, cancel := context.WithTimeout(context.Background(), j.timeout)
	defer cancel()
	entries := make([]coupon.EntryRecord, len(batch))
	for i, r := range batch {
		entries[i] = r.entry
	}
	held, err := j.db.JournalEntries(ctx, entries)
	for i, r := range batch {
		if err != nil {
			r.done <- journalRes{err: err}
		} else {
			r.done <- journalRes{held: held[i]}
		}
	}
	if err != nil {
		return
	}
	confirm := map[string][]coupon.Fact{}
	for i, r := range batch {
		if held[i].Number == r.entry.Number {
			confirm[r.entry.Campaign] = append(confirm[r.entry.Campaign], coupon.Fact{UserKey: r.key, Entry: held[i].Entry()})
		}
	}
	for id, facts := range confirm {
		if err := j.store.ConfirmEntries(ctx, id, facts); err != nil {
			j.log.Warn("confirming coupon entries failed; they are confirmed when next read", "campaign", id, "entries", len(facts), "err", err)
		}
	}
}
