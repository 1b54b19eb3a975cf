package web_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
)

// catalogue reads assets/room-text.js: the JSON after its first "=".
func catalogue(t *testing.T) map[string]map[string]string {
	t.Helper()
	b, err := os.ReadFile("assets/room-text.js")
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, "window.waitroomText =")
	require.GreaterOrEqual(t, i, 0, "room-text.js defines window.waitroomText")
	body := strings.TrimSpace(s[i+len("window.waitroomText ="):])
	body = strings.TrimSuffix(body, ";")
	var c map[string]map[string]string
	require.NoError(t, json.Unmarshal([]byte(body), &c), "room-text.js holds strict JSON after its first =")
	return c
}

// TestCatalogue: every language of the page's catalogue has every string of English (and no
// other, but for the plural forms English lacks: key_many beside key_other), with the same
// {placeholders}; the languages are event.PageLanguages; and every key the page uses is in the
// catalogue.
func TestCatalogue(t *testing.T) {
	c := catalogue(t)
	langs := make([]string, 0, len(c))
	for l := range c {
		langs = append(langs, l)
	}
	slices.Sort(langs)
	want := slices.Clone(event.PageLanguages)
	slices.Sort(want)
	require.Equal(t, want, langs, "the catalogue's languages are event.PageLanguages")

	placeholders := regexp.MustCompile(`\{\w+\}`)
	for _, l := range langs {
		for k, en := range c["en"] {
			s, ok := c[l][k]
			require.True(t, ok, "%s lacks %q", l, k)
			require.NotEmpty(t, s, "%s: %q is empty", l, k)
			require.ElementsMatch(t, placeholders.FindAllString(en, -1), placeholders.FindAllString(s, -1), "%s: the placeholders of %q", l, k)
		}
		for k, s := range c[l] {
			if base, ok := extraPluralForm(k); ok {
				other, ok := c["en"][base+"_other"]
				require.True(t, ok, "%s: %q is a plural form of %q, which English does not have", l, k, base)
				require.ElementsMatch(t, placeholders.FindAllString(other, -1), placeholders.FindAllString(s, -1), "%s: the placeholders of %q", l, k)
				continue
			}
			_, ok := c["en"][k]
			require.True(t, ok, "%s has %q, which English lacks", l, k)
		}
	}

	html, err := os.ReadFile("assets/room.html")
	require.NoError(t, err)
	notFound, err := os.ReadFile("assets/notfound.html")
	require.NoError(t, err)
	html = append(html, notFound...)
	js, err := os.ReadFile("assets/room.js")
	require.NoError(t, err)
	var used []string
	for _, m := range regexp.MustCompile(`data-t(?:-aria)?="(\w+)"|\.T "(\w+)"`).FindAllStringSubmatch(string(html), -1) {
		used = append(used, m[1]+m[2])
	}
	for _, p := range []string{`\bt\('(\w+)'[,)]`, `'(order_\w+)'`, `setKey\('[\w-]+', '(\w+)'[,)]`, `setConnection\((?:true|false), '(\w+)'`, `error: '(\w+)'`} {
		for _, m := range regexp.MustCompile(p).FindAllStringSubmatch(string(js), -1) {
			used = append(used, m[1])
		}
	}
	// The server writes the page's first words (web.go): its own keys.
	server, err := os.ReadFile("web.go")
	require.NoError(t, err)
	for _, m := range regexp.MustCompile(`\bT\("(\w+)"\)|"(order_\w+)"`).FindAllStringSubmatch(string(server), -1) {
		used = append(used, m[1]+m[2])
	}
	for _, m := range regexp.MustCompile(`\btn\('(\w+)'`).FindAllStringSubmatch(string(js), -1) {
		used = append(used, m[1]+"_one", m[1]+"_other")
	}
	for _, m := range regexp.MustCompile(`\bend\('(\w+)'`).FindAllStringSubmatch(string(js), -1) {
		used = append(used, "end_"+m[1]+"_title", "end_"+m[1]+"_text")
	}
	for _, u := range event.PageUnits { // room.js: tn('stock_' + page.unit, left)
		used = append(used, "stock_"+u+"_one", "stock_"+u+"_other", "stock_"+u+"_none")
	}
	require.Greater(t, len(used), 40, "the patterns still find the page's keys")
	for _, k := range used {
		_, ok := c["en"][k]
		require.True(t, ok, "the page uses %q, which the catalogue lacks", k)
	}
}

// extraPluralForm reports whether key is a CLDR plural form English has no use for (zero, two,
// few, many) and returns its base ("people" of "people_many").
func extraPluralForm(key string) (string, bool) {
	for _, f := range []string{"_zero", "_two", "_few", "_many"} {
		if base, ok := strings.CutSuffix(key, f); ok {
			return base, true
		}
	}
	return "", false
}
