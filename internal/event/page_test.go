package event

import (
	"math"
	"strings"
	"testing"
)

func TestPageValidate(t *testing.T) {
	ok := []Page{
		{},
		{Title: "봄 학기 수강 신청", Message: "Enrolment opens at nine. 한국어도 됩니다.", Language: "ko"},
		{LogoURL: "https://cdn.example/logo.png", Colors: PageColors{Accent: "#075E2C", Text: "#000000"}},
		{Colors: PageColors{Background: "#FFFFFF", Text: "#222", Accent: "#7a1f1f"}},
		{Language: "en", Title: strings.Repeat("가", MaxPageTitle/3)},
		{Language: "zh-Hans"}, {Language: "ja"}, {Language: "pt"}, {Language: "de"},
		{Unit: "tickets"}, {Unit: "seats"}, {Unit: "places"}, {Unit: "items"},
		{Template: "<header class=\"shop\"><h1>{{title}}</h1></header>\n<div class=\"wrap\">{{room}}</div>",
			CSS: ".shop h1 {\n\tfont-size: 2rem; /* big */\n}\nbody > header { background: url(https://cdn.example/bg.png); }"},
	}
	for _, p := range ok {
		if err := p.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", p, err)
		}
	}
	for _, c := range []struct {
		p    Page
		want string
	}{
		{Page{Title: strings.Repeat("x", MaxPageTitle+1)}, "page.title"},
		{Page{Message: strings.Repeat("x", MaxPageMessage+1)}, "page.message"},
		{Page{Message: "two\nlines"}, "control characters"},
		{Page{Title: "bad \xff utf-8"}, "control characters"},
		{Page{LogoURL: "javascript:alert(1)"}, "page.logo_url"},
		{Page{LogoURL: "data:image/png;base64,AAAA"}, "page.logo_url"},
		{Page{LogoURL: "//cdn.example/logo.png"}, "page.logo_url"},
		{Page{LogoURL: "https://x/" + strings.Repeat("a", MaxLogoURL)}, "page.logo_url"},
		{Page{Language: "it"}, "page.language"},
		{Page{Language: "KO"}, "page.language"},
		{Page{Language: "zh"}, "page.language"},
		{Page{Language: "zh-hans"}, "page.language"},
		{Page{Unit: "Tickets"}, "page.unit"},
		{Page{Unit: "tickets left"}, "page.unit"},
		{Page{Unit: "seat"}, "page.unit"},
		{Page{Template: "<script>alert(1)</script>{{room}}"}, "page.template: <script> is not allowed"},
		{Page{Template: "<header>no card</header>"}, "page.template must hold {{room}}"},
		{Page{CSS: strings.Repeat("a", MaxPageCSS+1)}, "page.css must be at most"},
		{Page{CSS: "</style><script>alert(1)</script>"}, "page.css must not contain \"<\""},
		{Page{CSS: "body{}\x00"}, "page.css must be UTF-8 text without control characters"},
		{Page{Colors: PageColors{Accent: "blue"}}, "page.colors.accent must be a CSS hex"},
		{Page{Colors: PageColors{Text: "#12345"}}, "page.colors.text must be a CSS hex"},
		{Page{Colors: PageColors{Background: "#fff;}"}}, "page.colors.background must be a CSS hex"},
		{Page{Colors: PageColors{Text: "#999999"}}, "page.colors.text on the white card"},
		{Page{Colors: PageColors{Background: "#000000"}}, "page.colors.text on page.colors.background"},
		{Page{Colors: PageColors{Accent: "#ffcc00"}}, "white button text on page.colors.accent"},
	} {
		err := c.p.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want an error about %q", c.p, err, c.want)
		}
	}
	e := Event{ID: "e", MaxActive: 1, Page: Page{Language: "nl"}}.WithDefaults()
	if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "page.language") {
		t.Errorf("Event.Validate does not check the page: %v", err)
	}
}

// TestContrast checks the formula against figures published with WCAG: black on white is
// 21:1, a colour on itself 1:1, #767676 on white the well-known 4.54:1 (the lightest grey
// that passes AA), and the page's defaults keep AA.
func TestContrast(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want float64
	}{
		{"#000", "#fff", 21}, {"#ffffff", "#000000", 21}, {"#abc", "#AABBCC", 1}, {"#767676", "#ffffff", 4.54},
	} {
		if got := Contrast(c.a, c.b); math.Abs(got-c.want) > 0.01 {
			t.Errorf("Contrast(%s, %s) = %.3f, want %.2f", c.a, c.b, got, c.want)
		}
	}
	if err := (PageColors{Background: DefaultPageBackground, Text: DefaultPageText, Accent: DefaultPageAccent}).Validate(); err != nil {
		t.Errorf("the page's own palette fails: %v", err)
	}
}
