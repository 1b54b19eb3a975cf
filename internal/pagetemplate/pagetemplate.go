// Package pagetemplate reads an operator's template for the waiting page (an event's
// page.template, issue 21 item 10): restricted HTML that the server writes around the page's
// own card, for a site that wants its own look (with the event's page.css for the styles).
//
// The page must never run the operator's scripts, however the template is written: a
// template's author is an admin key of the operator role, and the page is where every visitor
// of the event keeps its place. So a template is parsed as the browser would parse it
// (golang.org/x/net/html, the HTML5 algorithm) and then checked against an allow-list of
// elements and attributes; anything else is refused with an error naming it, never stripped
// and kept quiet. What the page gets is the parsed tree written out again by html.Render
// (every text and attribute value escaped), never the operator's bytes. No element that runs
// or holds raw text (script, style, iframe, object, svg, math, template, textarea, noscript…),
// no form control, no event-handler or style attribute, and links only to http, https and
// mailto URLs. The page's Content-Security-Policy stays as it is (scripts from the origin
// only), a second wall if this one ever had a hole.
//
// Placeholders, in text only: {{room}}, the page's card (place in line, progress, wait,
// buttons), exactly once, at the top level or inside div, section or article elements only;
// {{title}}, the event's title (page.title, else its name), escaped.
package pagetemplate

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// MaxBytes is the largest template (16 KiB).
const MaxBytes = 16 << 10

// MaxImageOrigins is how many origins a template's images may come from (each enters the
// page's img-src).
const MaxImageOrigins = 4

// elements are the elements a template may use, each with the attributes it may carry
// besides globalAttrs.
var elements = map[string][]string{
	"a": {"href"}, "abbr": nil, "address": nil, "article": nil, "aside": nil, "b": nil, "blockquote": nil,
	"br": nil, "div": nil, "em": nil, "figcaption": nil, "figure": nil, "footer": nil,
	"h1": nil, "h2": nil, "h3": nil, "h4": nil, "h5": nil, "h6": nil, "header": nil, "hr": nil, "i": nil,
	"img": {"src", "alt", "width", "height"}, "li": nil, "nav": nil, "ol": nil, "p": nil, "section": nil,
	"small": nil, "span": nil, "strong": nil, "ul": nil,
}

// globalAttrs are the attributes every allowed element may carry.
var globalAttrs = []string{"class", "lang", "dir", "title", "aria-label"}

// roomContainers are the elements {{room}} may be inside (and all its ancestors must be
// among them): block boxes whose content may be the page's <main>, and that no click or
// parser rule turns into something else (not a link, not a paragraph).
var roomContainers = []string{"div", "section", "article"}

var (
	classPattern = regexp.MustCompile(`^[A-Za-z0-9_ -]{0,200}$`)
	langPattern  = regexp.MustCompile(`^[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*$`)
	sizePattern  = regexp.MustCompile(`^[0-9]{1,4}$`)
	placeholder  = regexp.MustCompile(`\{\{[^{}]*\}\}`)
)

// Markers stand for the placeholders in the written template: comments, which a template
// cannot contain itself (its comments are dropped), so no operator text can forge one.
const (
	roomMark  = "<!--waitroom:room-->"
	titleMark = "<!--waitroom:title-->"
)

// Template is a checked template, ready to be written around the page's card.
type Template struct {
	safe    string   // the template written out again, with roomMark and titleMark
	origins []string // the origins of its images (scheme://host[:port]), in order of appearance
}

// Parse checks src and returns it as a Template. Errors name the first thing refused (an
// element, an attribute, a URL, a placeholder), as "page.template: …".
func Parse(src string) (*Template, error) {
	switch {
	case len(src) > MaxBytes:
		return nil, fmt.Errorf("page.template must be at most %d bytes", MaxBytes)
	case !utf8.ValidString(src) || strings.ContainsFunc(src, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' && r != '\r' }):
		return nil, errors.New("page.template must be UTF-8 text without control characters (but for new lines and tabs)")
	}
	ctx := &html.Node{Type: html.ElementNode, Data: "div", DataAtom: atom.Div}
	nodes, err := html.ParseFragment(strings.NewReader(src), ctx)
	if err != nil {
		return nil, fmt.Errorf("page.template: %v", err)
	}
	c := checker{}
	root := &html.Node{Type: html.ElementNode, Data: "div", DataAtom: atom.Div}
	for _, n := range nodes {
		root.AppendChild(n)
	}
	if err := c.children(root, true); err != nil {
		return nil, err
	}
	if c.rooms != 1 {
		return nil, fmt.Errorf("page.template must hold {{room}} (the page's card) once, not %d times", c.rooms)
	}
	var b strings.Builder
	for n := root.FirstChild; n != nil; n = n.NextSibling {
		if err := html.Render(&b, n); err != nil {
			return nil, fmt.Errorf("page.template: %v", err)
		}
	}
	return &Template{safe: b.String(), origins: c.origins}, nil
}

// Render writes the template for an event titled title: the HTML before the page's card and
// the HTML after it (each safe to put into the page's body as it is).
func (t *Template) Render(title string) (before, after string) {
	s := strings.ReplaceAll(t.safe, titleMark, html.EscapeString(title))
	before, after, _ = strings.Cut(s, roomMark)
	return before, after
}

// ImageOrigins are the origins the template's images come from, for the page's img-src.
func (t *Template) ImageOrigins() []string { return slices.Clone(t.origins) }

type checker struct {
	rooms   int
	origins []string
}

// children checks the children of n; roomOK says whether {{room}} may stand among them.
// Comments are dropped; placeholders in text become their markers.
func (c *checker) children(n *html.Node, roomOK bool) error {
	for ch := n.FirstChild; ch != nil; {
		next := ch.NextSibling
		switch ch.Type {
		case html.CommentNode:
			n.RemoveChild(ch)
		case html.TextNode:
			if err := c.text(n, ch, roomOK); err != nil {
				return err
			}
		case html.ElementNode:
			if err := c.element(ch); err != nil {
				return err
			}
			if err := c.children(ch, roomOK && slices.Contains(roomContainers, ch.Data)); err != nil {
				return err
			}
		default: // a doctype, say
			return errors.New("page.template may hold elements and text only")
		}
		ch = next
	}
	return nil
}

// text replaces the placeholders of the text node t (a child of parent) by their markers;
// the text between them keeps no other double brace, so that a mistyped placeholder is told
// rather than shown to every visitor.
func (c *checker) text(parent, t *html.Node, roomOK bool) error {
	stray := func(s string) bool { return strings.Contains(s, "{{") || strings.Contains(s, "}}") }
	const strayErr = "page.template: a placeholder is {{room}} or {{title}}; write other double braces as &#123;&#123;"
	locs := placeholder.FindAllStringIndex(t.Data, -1)
	at := 0
	for _, l := range locs {
		if stray(t.Data[at:l[0]]) {
			return errors.New(strayErr)
		}
		var mark string
		switch name := strings.TrimSpace(t.Data[l[0]+2 : l[1]-2]); name {
		case "room":
			if !roomOK {
				return errors.New("page.template: {{room}} may be only at the top level or inside div, section and article elements")
			}
			c.rooms++
			mark = "waitroom:room"
		case "title":
			mark = "waitroom:title"
		default:
			return fmt.Errorf("page.template: unknown placeholder {{%s}} (there are {{room}} and {{title}})", name)
		}
		if l[0] > at {
			parent.InsertBefore(&html.Node{Type: html.TextNode, Data: t.Data[at:l[0]]}, t)
		}
		parent.InsertBefore(&html.Node{Type: html.CommentNode, Data: mark}, t)
		at = l[1]
	}
	rest := t.Data[at:]
	switch {
	case stray(rest):
		return errors.New(strayErr)
	case rest == "":
		parent.RemoveChild(t)
	default:
		t.Data = rest
	}
	return nil
}

// element checks an element and its attributes.
func (c *checker) element(n *html.Node) error {
	allowed, ok := elements[n.Data]
	if !ok || n.Namespace != "" {
		return fmt.Errorf("page.template: <%s> is not allowed (allowed: %s)", n.Data, allowedList())
	}
	for _, a := range n.Attr {
		if a.Namespace != "" || (!slices.Contains(globalAttrs, a.Key) && !slices.Contains(allowed, a.Key)) {
			return fmt.Errorf("page.template: <%s %s> is not allowed (attributes: %s, and %s on <a>, %s on <img>)",
				n.Data, a.Key, strings.Join(globalAttrs, ", "), strings.Join(elements["a"], ", "), strings.Join(elements["img"], ", "))
		}
		if strings.Contains(a.Val, "{{") {
			return fmt.Errorf("page.template: <%s %s>: placeholders go in text, not in attributes", n.Data, a.Key)
		}
		if err := c.value(n.Data, a.Key, a.Val); err != nil {
			return err
		}
	}
	if n.Data == "a" {
		// The page sends no referrer anyway (Referrer-Policy); a new window gets no opener.
		n.Attr = append(n.Attr, html.Attribute{Key: "rel", Val: "noopener noreferrer"})
	}
	return nil
}

// value checks an attribute's value (the parser has decoded its character references).
func (c *checker) value(elem, key, v string) error {
	bad := func(rule string) error { return fmt.Errorf("page.template: <%s %s=%q>: %s", elem, key, v, rule) }
	switch key {
	case "class":
		if !classPattern.MatchString(v) {
			return bad("class names are letters, digits, _ and -")
		}
	case "lang":
		if !langPattern.MatchString(v) {
			return bad("a language tag such as en or zh-Hans")
		}
	case "dir":
		if v != "ltr" && v != "rtl" && v != "auto" {
			return bad("ltr, rtl or auto")
		}
	case "width", "height":
		if !sizePattern.MatchString(v) {
			return bad("a number of pixels")
		}
	case "href":
		if !absoluteURL(v, "http", "https", "mailto") {
			return bad("an absolute http, https or mailto URL")
		}
	case "src":
		if !absoluteURL(v, "http", "https") {
			return bad("an absolute http or https URL")
		}
		u, _ := url.Parse(v) // parsed above
		origin := strings.ToLower(u.Scheme) + "://" + u.Host
		if !slices.Contains(c.origins, origin) {
			if len(c.origins) == MaxImageOrigins {
				return bad(fmt.Sprintf("images may come from at most %d origins", MaxImageOrigins))
			}
			c.origins = append(c.origins, origin)
		}
	}
	return nil
}

// absoluteURL reports whether v is a URL of one of schemes: written with the scheme first, no
// spaces, and (but for mailto) a host.
func absoluteURL(v string, schemes ...string) bool {
	u, err := url.Parse(v)
	if err != nil || strings.ContainsAny(v, " \t\n\r\\") {
		return false
	}
	s := strings.ToLower(u.Scheme)
	if !slices.Contains(schemes, s) || !strings.HasPrefix(strings.ToLower(v), s+":") {
		return false
	}
	return s == "mailto" || u.Host != ""
}

func allowedList() string {
	names := make([]string, 0, len(elements))
	for e := range elements {
		names = append(names, e)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
