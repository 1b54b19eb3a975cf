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

// TestUpdateOnly: a write with event.UpdateOnly (HTTP If-Match: *) creates nothing when no
// event exists (event.ErrNotFound), and over one that exists, at any version, answers the
// stored event as a plain update does: its draw seed kept, its time of update set.
func TestUpdateOnly(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := open(t, b.url(t))
			_, _, err := db.PutEventIf(ctx, sampleEvent("absent"), event.UpdateOnly)
			require.ErrorIs(t, err, event.ErrNotFound)
			_, err = db.GetEvent(ctx, "absent")
			require.ErrorIs(t, err, event.ErrNotFound, "nothing created")

			first, _, err := db.PutEventIf(ctx, sampleEvent("there"), 0)
			require.NoError(t, err)
			_, _, err = db.PutEventIf(ctx, sampleEvent("there"), 0) // version 2
			require.NoError(t, err)
			next := sampleEvent("there")
			next.Name = "Changed"
			next.DrawSeed = nil // as an HTTP write sends it: the stored seed stays
			stored, created, err := db.PutEventIf(ctx, next, event.UpdateOnly)
			require.NoError(t, err)
			require.False(t, created)
			require.Equal(t, int64(3), stored.Version)
			require.Equal(t, first.DrawSeed, stored.DrawSeed, "the stored draw seed, not a new one")
			require.False(t, stored.UpdatedAt.IsZero())
			got, err := db.GetEvent(ctx, "there")
			require.NoError(t, err)
			require.Equal(t, "Changed", got.Name)
			require.Equal(t, first.DrawSeed, got.DrawSeed)
		})
	}
}
