package sqlstore_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
)

// TestCreateOnly: a write with event.CreateOnly creates an event that does not exist, and
// leaves one that does as it is, naming its version (the console's "create" never replaces an
// event). On both databases.
func TestCreateOnly(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := open(t, b.url(t))
			first, created, err := db.PutEventIf(ctx, sampleEvent("fresh"), event.CreateOnly)
			require.NoError(t, err)
			require.True(t, created)
			require.Equal(t, int64(1), first.Version)
			second := sampleEvent("fresh")
			second.Name = "Another"
			_, _, err = db.PutEventIf(ctx, second, event.CreateOnly)
			var ve *event.VersionError
			require.True(t, errors.As(err, &ve), "%v", err)
			require.Equal(t, int64(1), ve.Current)
			got, err := db.GetEvent(ctx, "fresh")
			require.NoError(t, err)
			require.Equal(t, first.Name, got.Name, "left as it was")
			require.Equal(t, int64(1), got.Version)
		})
	}
}
