package event

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/waitroom/waitroom/internal/pagetemplate"
)

// Page is what the waiting-room page of the event shows besides its own text (issue 10:
// a page for real events). Every field is optional; the zero Page is the plain page.
type Page struct {
	// Title is the page's heading (defaults to the event's name), at most MaxPageTitle bytes.
	Title string
	// Message is the operator's text, shown under the title while joining and waiting (at
	// most MaxPageMessage bytes).
	Message string
	// LogoURL is an image shown above the title: an absolute http or https URL (the page
	// allows images from its origin, and only from it, in its Content-Security-Policy).
	LogoURL string
	// Colors replace the page's palette; see PageColors.
	Colors PageColors
	// Language is the page's language when the visitor's browser asks for none the page
	// speaks (Accept-Language): one of PageLanguages, "" for English.
	Language string
	// Unit is what the units left of the sale are called on the page ("5,000 tickets left"):
	// one of PageUnits, each translated with its plural forms in every language of the page;
	// "" says "5,000 left".
	Unit string
	// Template is the operator's layout around the page's card, for a site that wants its
	// own look: restricted HTML with the placeholders {{room}} (the card, once) and {{title}},
	// checked by package pagetemplate (its rules are that package's; at most
	// pagetemplate.MaxBytes). "" for the plain layout.
	Template string
	// CSS is the operator's style sheet, served at /e/{event_id}/page.css and linked after the
	// page's own, so it may restyle anything (at most MaxPageCSS bytes of text; see
	// validCSS). The page's Content-Security-Policy still governs it: no script, images only
	// from the page's origin, data: and the origins of the logo and the template's images, no
	// fonts but the visitor's own.
	CSS string
}

// PageColors are CSS hex colours (#rgb or #rrggbb), each "" for the page's default. With any
// of them set the page keeps to its light palette (no dark scheme), and the set must keep
// WCAG 2 AA contrast (4.5:1 for text, https://www.w3.org/TR/WCAG21/#contrast-minimum),
// checked against the defaults of the ones left out:
//
//	text on the white card and on the background  >= 4.5
//	white button text on the accent               >= 4.5 (so the bar is >= 3:1 on the card too)
type PageColors struct {
	Background string // behind the card (the page's own default: DefaultPageBackground)
	Text       string // the text (DefaultPageText)
	Accent     string // buttons and the progress bar (DefaultPageAccent)
}

// The light palette of the page (internal/web/assets/waitroom.css), which PageColors' contrast
// is checked against.
const (
	DefaultPageBackground = "#eef1f5"
	DefaultPageText       = "#14171f"
	DefaultPageAccent     = "#1d4ed8"
	pageCard              = "#ffffff" // the card, and the button text
	// MinContrast is WCAG 2 AA's least contrast ratio for body text.
	MinContrast = 4.5
)

// Limits of Page (Validate).
const (
	MaxPageTitle   = 200  // bytes
	MaxPageMessage = 1000 // bytes
	MaxLogoURL     = 2000 // bytes
	MaxPageCSS     = 16 << 10
)

// PageLanguages are the languages the waiting page speaks, as BCP 47 tags (its catalogue,
// internal/web/assets/room-text.js, has every string in each; a test keeps them in step).
// The first is the default. Chinese is written in simplified characters (zh-Hans);
// Portuguese in Brazil's usage.
var PageLanguages = []string{"en", "ko", "ja", "zh-Hans", "es", "fr", "de", "pt"}

// PageUnits are the names the page has for the units left of a sale (Page.Unit), each in
// every language of its catalogue with that language's plural forms: a fixed list rather than
// the operator's own word, which could not be put in the plural of Japanese, French or Korean
// counters (the operator's message says anything more).
var PageUnits = []string{"tickets", "seats", "places", "items"}

// IsZero reports whether p sets nothing.
func (p Page) IsZero() bool { return p == Page{} }

// IsZero reports whether c sets no colour.
func (c PageColors) IsZero() bool { return c == PageColors{} }

var hexColor = regexp.MustCompile(`^#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6})$`)

// Validate names the first field out of range (JSON names under "page").
func (p Page) Validate() error {
	switch {
	case len(p.Title) > MaxPageTitle:
		return fmt.Errorf("page.title must be at most %d bytes", MaxPageTitle)
	case len(p.Message) > MaxPageMessage:
		return fmt.Errorf("page.message must be at most %d bytes", MaxPageMessage)
	case len(p.LogoURL) > MaxLogoURL:
		return fmt.Errorf("page.logo_url must be at most %d bytes", MaxLogoURL)
	case !ValidText(p.Title) || !ValidText(p.Message) || !ValidText(p.LogoURL):
		return errors.New("page.title, page.message and page.logo_url must be UTF-8 text without control characters")
	case p.LogoURL != "" && !httpURL(p.LogoURL):
		return errors.New("page.logo_url must be an absolute http or https URL")
	case p.Language != "" && !slices.Contains(PageLanguages, p.Language):
		return fmt.Errorf("page.language must be one of %q, or left out", PageLanguages)
	case p.Unit != "" && !slices.Contains(PageUnits, p.Unit):
		return fmt.Errorf("page.unit must be one of %q, or left out (\"5,000 left\")", PageUnits)
	}
	if err := validCSS(p.CSS); err != nil {
		return err
	}
	if p.Template != "" {
		if _, err := pagetemplate.Parse(p.Template); err != nil {
			return err
		}
	}
	return p.Colors.Validate()
}

// validCSS checks page.css: at most MaxPageCSS bytes of UTF-8 text (new lines and tabs
// allowed), and no "<", which CSS never needs outside its strings: the sheet is served alone
// as text/css (nosniff), and a "</style" could matter only to a page that put it inline. What
// CSS can reach is the Content-Security-Policy's to say, not this check's.
func validCSS(css string) error {
	switch {
	case len(css) > MaxPageCSS:
		return fmt.Errorf("page.css must be at most %d bytes", MaxPageCSS)
	case !utf8.ValidString(css) || strings.ContainsFunc(css, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' && r != '\r' }):
		return errors.New("page.css must be UTF-8 text without control characters (but for new lines and tabs)")
	case strings.Contains(css, "<"):
		return errors.New(`page.css must not contain "<" (write \3c in a CSS string)`)
	}
	return nil
}

// Validate checks each colour's form, then the contrast of the palette they make.
func (c PageColors) Validate() error {
	for _, f := range []struct{ v, field string }{{c.Background, "background"}, {c.Text, "text"}, {c.Accent, "accent"}} {
		if f.v != "" && !hexColor.MatchString(f.v) {
			return fmt.Errorf("page.colors.%s must be a CSS hex colour (#rgb or #rrggbb)", f.field)
		}
	}
	bg, text, accent := or(c.Background, DefaultPageBackground), or(c.Text, DefaultPageText), or(c.Accent, DefaultPageAccent)
	for _, pair := range []struct {
		fg, bg, what string
	}{
		{text, pageCard, "page.colors.text on the white card"},
		{text, bg, "page.colors.text on page.colors.background"},
		{pageCard, accent, "white button text on page.colors.accent"},
	} {
		if r := Contrast(pair.fg, pair.bg); r < MinContrast {
			return fmt.Errorf("%s has a contrast of %.2f:1; at least %.1f:1 is needed (WCAG 2 AA)", pair.what, r, MinContrast)
		}
	}
	return nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Contrast is the WCAG 2 contrast ratio (1..21) of two hex colours (#rgb or #rrggbb):
// (L1 + 0.05) / (L2 + 0.05) of their relative luminances, the lighter over the darker
// (https://www.w3.org/TR/WCAG21/#dfn-contrast-ratio). A malformed colour counts as black.
func Contrast(a, b string) float64 {
	la, lb := luminance(a), luminance(b)
	if la < lb {
		la, lb = lb, la
	}
	return (la + 0.05) / (lb + 0.05)
}

// luminance is the relative luminance of a hex colour
// (https://www.w3.org/TR/WCAG21/#dfn-relative-luminance).
func luminance(hex string) float64 {
	if !hexColor.MatchString(hex) {
		return 0
	}
	h := hex[1:]
	if len(h) == 3 {
		h = string([]byte{h[0], h[0], h[1], h[1], h[2], h[2]})
	}
	var lin [3]float64
	for i := range lin {
		v, _ := strconv.ParseUint(h[2*i:2*i+2], 16, 8) // matched above: cannot fail
		s := float64(v) / 255
		if s <= 0.04045 {
			lin[i] = s / 12.92
		} else {
			lin[i] = math.Pow((s+0.055)/1.055, 2.4)
		}
	}
	return 0.2126*lin[0] + 0.7152*lin[1] + 0.0722*lin[2]
}
