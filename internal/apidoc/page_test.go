package apidoc_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/apidoc"
	"github.com/waitroom/waitroom/internal/event"
)

// TestPageEnums: the values the document lists for the waiting page's fields are the event
// package's, so a language added there cannot be missing here (or the other way round).
func TestPageEnums(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				EventPage struct {
					Properties map[string]struct {
						Enum []string `json:"enum"`
					} `json:"properties"`
				} `json:"EventPage"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(apidoc.Document(), &doc))
	props := doc.Components.Schemas.EventPage.Properties
	require.Equal(t, event.PageLanguages, props["language"].Enum, "page.language")
	require.Equal(t, event.PageUnits, props["unit"].Enum, "page.unit")
}
