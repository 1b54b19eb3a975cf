package pagetemplate

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// attacks are stored-XSS attempts (and page hijacks) a template must be refused for: each
// would run script, load something the page does not, or take over the page's own elements.
var attacks = []struct{ src, want string }{
	{`<script>alert(1)</script>{{room}}`, "<script> is not allowed"},
	{`<img src=x onerror=alert(1)>{{room}}`, "absolute http or https URL"},
	{`<img src="https://cdn.example/a.png" onerror=alert(1)>{{room}}`, "<img onerror>"},
	{`<img src="https://cdn.example/a.png" onload="alert(1)">{{room}}`, "onload"},
	{`<div onclick="alert(1)">{{room}}</div>`, "onclick"},
	{`<a href="javascript:alert(1)">x</a>{{room}}`, "absolute http, https or mailto URL"},
	{`<a href="JavaScript:alert(1)">x</a>{{room}}`, "absolute http, https or mailto URL"},
	{`<a href="&#106;avascript:alert(1)">x</a>{{room}}`, "absolute http, https or mailto URL"},
	{`<a href="jav&#x09;ascript:alert(1)">x</a>{{room}}`, "absolute http, https or mailto URL"},
	{`<a href=" javascript:alert(1)">x</a>{{room}}`, "absolute http, https or mailto URL"},
	{`<a href="data:text/html,&lt;script&gt;alert(1)&lt;/script&gt;">x</a>{{room}}`, "absolute http, https or mailto URL"},
	{`<a href="https:alert(1)">x</a>{{room}}`, "absolute http, https or mailto URL"},
	{`<a href="//evil.example/">x</a>{{room}}`, "absolute http, https or mailto URL"},
	{`<img src="data:image/svg+xml,&lt;svg onload=alert(1)&gt;">{{room}}`, "absolute http or https URL"},
	{`<svg onload=alert(1)></svg>{{room}}`, "<svg> is not allowed"},
	{`<svg><script>alert(1)</script></svg>{{room}}`, "<svg> is not allowed"},
	{`<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>{{room}}`, "<math> is not allowed"},
	{`<noscript><p title="</noscript><img src=x onerror=alert(1)>">{{room}}`, "<noscript> is not allowed"},
	{`<style>body{background:url(https://evil.example/)}</style>{{room}}`, "<style> is not allowed"},
	{`<div style="background:url(javascript:alert(1))">{{room}}</div>`, "<div style>"},
	{`<iframe src="https://evil.example/"></iframe>{{room}}`, "<iframe> is not allowed"},
	{`<object data="https://evil.example/x.swf"></object>{{room}}`, "<object> is not allowed"},
	{`<embed src="https://evil.example/x.swf">{{room}}`, "<embed> is not allowed"},
	{`<form action="https://evil.example/"><button>Join</button></form>{{room}}`, "<form> is not allowed"},
	{`<input name="x">{{room}}`, "<input> is not allowed"},
	{`<base href="https://evil.example/">{{room}}`, "<base> is not allowed"},
	{`<meta http-equiv="refresh" content="0;url=https://evil.example/">{{room}}`, "<meta> is not allowed"},
	{`<link rel="stylesheet" href="https://evil.example/x.css">{{room}}`, "<link> is not allowed"},
	{`<template><script>alert(1)</script></template>{{room}}`, "<template> is not allowed"},
	{`<textarea>{{room}}</textarea>`, "<textarea> is not allowed"},
	{`<xmp><script>alert(1)</script></xmp>{{room}}`, "<xmp> is not allowed"},
	{`<plaintext>{{room}}`, "<plaintext> is not allowed"},
	{`<!--><script>alert(1)</script>-->{{room}}`, "<script> is not allowed"},
	{`<div id="join">Join here</div>{{room}}`, "<div id>"},
	{`<a href="https://shop.example/" target="_blank">x</a>{{room}}`, "<a target>"},
	{`<span data-x="1">x</span>{{room}}`, "<span data-x>"},
	{`<p title="{{room}}">x</p>{{room}}`, "placeholders go in text"},
	{`<p>{{room}}</p>`, "{{room}} may be only"},
	{`<a href="https://shop.example/"><div>{{room}}</div></a>`, "{{room}} may be only"},
	{`<ul><li>{{room}}</li></ul>`, "{{room}} may be only"},
	{`<header>Shop</header>`, "{{room}} (the page's card) once, not 0 times"},
	{`{{room}}<div>{{room}}</div>`, "once, not 2 times"},
	{`{{script}}{{room}}`, "unknown placeholder {{script}}"},
	{`{{room}} {{ title }`, "a placeholder is {{room}} or {{title}}"},
	{`<img src="https://a.example/1.png"><img src="https://b.example/1.png"><img src="https://c.example/1.png">` +
		`<img src="https://d.example/1.png"><img src="https://e.example/1.png">{{room}}`, "at most 4 origins"},
	{`<div class="a&quot; onclick=&quot;x">{{room}}</div>`, "class names"},
	{`<img src="https://cdn.example/a.png" width="100%">{{room}}`, "a number of pixels"},
	{"<p>\x00</p>{{room}}", "control characters"},
	{strings.Repeat("<p>x</p>", MaxBytes/8) + "{{room}}", "at most"},
}

func TestParseRefusesAttacks(t *testing.T) {
	for _, a := range attacks {
		tpl, err := Parse(a.src)
		if err == nil || !strings.Contains(err.Error(), a.want) {
			t.Errorf("Parse(%.80q) = %v, want an error about %q", a.src, err, a.want)
			continue
		}
		if tpl != nil {
			t.Errorf("Parse(%.80q) returned a template with its error", a.src)
		}
	}
}

// TestRender: a template of the kind a site writes comes out as the same tree, written out
// again, with the title escaped in its place, the card's place between before and after, and
// links without an opener; text that looks like markup stays text.
func TestRender(t *testing.T) {
	src := `<header class="shop-head" lang="en">
  <img src="https://cdn.shop.example/logo.svg" alt="Shop &amp; Co" width="120" height="40">
  <h1>{{ title }} — tickets</h1>
  <nav aria-label="Shop"><a href="https://shop.example/">Home</a> · <a href="mailto:help@shop.example">Help</a></nav>
</header>
<!-- the card -->
<section class="body"><div class="wrap">{{room}}</div></section>
<footer class="shop-foot"><p>&lt;script&gt; is text here. Prices in €. 3 &lt; 4.</p></footer>`
	tpl, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	before, after := tpl.Render(`Spring "concert" </h1><script>alert(1)</script>`)
	wantBefore := `<header class="shop-head" lang="en">
  <img src="https://cdn.shop.example/logo.svg" alt="Shop &amp; Co" width="120" height="40"/>
  <h1>Spring &#34;concert&#34; &lt;/h1&gt;&lt;script&gt;alert(1)&lt;/script&gt; — tickets</h1>
  <nav aria-label="Shop"><a href="https://shop.example/" rel="noopener noreferrer">Home</a> · <a href="mailto:help@shop.example" rel="noopener noreferrer">Help</a></nav>
</header>

<section class="body"><div class="wrap">`
	if before != wantBefore {
		t.Errorf("before:\n%s\nwant:\n%s", before, wantBefore)
	}
	if want := `</div></section>
<footer class="shop-foot"><p>&lt;script&gt; is text here. Prices in €. 3 &lt; 4.</p></footer>`; after != want {
		t.Errorf("after:\n%s\nwant:\n%s", after, want)
	}
	if got := tpl.ImageOrigins(); !slices.Equal(got, []string{"https://cdn.shop.example"}) {
		t.Errorf("ImageOrigins() = %q", got)
	}
	// The markers cannot be forged by text.
	tpl, err = Parse(`&lt;!--waitroom:room--&gt;{{room}}<p>&lt;!--waitroom:title--&gt;</p>`)
	if err != nil {
		t.Fatal(err)
	}
	before, after = tpl.Render("T")
	if before != `&lt;!--waitroom:room--&gt;` || after != `<p>&lt;!--waitroom:title--&gt;</p>` {
		t.Errorf("forged markers: %q | %q", before, after)
	}
}

// FuzzParse: whatever a template holds, once it passes, the page a browser builds from it
// (the written template around a stand-in card, parsed as HTML5 in the body) holds only
// allowed elements and attributes, no URL but http(s) and mailto ones, exactly one card, and
// the title only as text. Its seeds are the attacks and a real template.
func FuzzParse(f *testing.F) {
	for _, a := range attacks {
		if len(a.src) < 1000 { // not the one too long: the fuzzer would spend its time minimising it
			f.Add(a.src, `</h1><script>alert(1)</script>`)
		}
	}
	f.Add(`<header><h1>{{title}}</h1></header><div>{{room}}</div><footer><a href="https://x.example/">x</a></footer>`, `<img src=x onerror=alert(1)>`)
	f.Add(`<div><section><article>{{room}}</article></section></div><p>{{title}}</p>`, `"'<>&`)
	f.Fuzz(func(t *testing.T, src, title string) {
		tpl, err := Parse(src)
		if err != nil {
			return
		}
		before, after := tpl.Render(title)
		body := &html.Node{Type: html.ElementNode, Data: "body", DataAtom: atom.Body}
		nodes, err := html.ParseFragment(strings.NewReader(before+`<main id="card">card</main>`+after), body)
		if err != nil {
			t.Fatal(err)
		}
		cards := 0
		var walk func(*html.Node) error
		walk = func(n *html.Node) error {
			switch n.Type {
			case html.ElementNode:
				if n.Data == "main" && len(n.Attr) == 1 && n.Attr[0].Val == "card" {
					cards++
					return nil
				}
				allowed, ok := elements[n.Data]
				if !ok || n.Namespace != "" {
					return fmt.Errorf("element <%s> in %q", n.Data, src)
				}
				for _, a := range n.Attr {
					if !slices.Contains(globalAttrs, a.Key) && !slices.Contains(allowed, a.Key) && !(n.Data == "a" && a.Key == "rel") {
						return fmt.Errorf("attribute %s on <%s> in %q", a.Key, n.Data, src)
					}
					if (a.Key == "href" || a.Key == "src") && !absoluteURL(a.Val, "http", "https", "mailto") {
						return fmt.Errorf("URL %q in %q", a.Val, src)
					}
				}
			case html.CommentNode, html.DoctypeNode:
				return fmt.Errorf("node %v %q in %q", n.Type, n.Data, src)
			}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				if err := walk(c); err != nil {
					return err
				}
			}
			return nil
		}
		for _, n := range nodes {
			if err := walk(n); err != nil {
				t.Fatal(err)
			}
		}
		if cards != 1 {
			t.Fatalf("%d cards in the page of %q", cards, src)
		}
	})
}
