package sale

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConflictErrorWording(t *testing.T) {
	require.Equal(t, "only 0 units are available", (&ConflictError{}).Error())
	require.Equal(t, "only 1 unit is available", (&ConflictError{Available: 1}).Error())
	require.Equal(t, "only 2 units are available", (&ConflictError{Available: 2}).Error())
	require.Equal(t, "seats A-01, A-02 are held or sold by someone else", (&ConflictError{Seats: []string{"A-01", "A-02"}}).Error())
}

func TestNormalizeNamesADuplicateSeat(t *testing.T) {
	_, err := HoldParams{HoldID: "h", Seats: []string{"B-02", "A-01", "B-02"}}.Normalize()
	var ie *InvalidError
	require.ErrorAs(t, err, &ie)
	require.Empty(t, ie.Seats, "B-02 is not unknown")
	require.Equal(t, `seat "B-02" is listed twice`, ie.Error())
}
