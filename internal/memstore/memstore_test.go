package memstore_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/memstore"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) queue.Store {
		return memstore.New(memstore.Config{Now: now})
	})
}
