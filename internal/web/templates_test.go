package web

import "testing"

// TestTemplatesFailClosed: a stored template that does not pass pagetemplate (written to the
// database by hand, or checked by older rules) is not used; a good one is parsed once and
// reused until the event's template changes.
func TestTemplatesFailClosed(t *testing.T) {
	var c templates
	if tpl := c.get("ev", `<script>alert(1)</script>{{room}}`); tpl != nil {
		t.Fatal("a template that does not pass was used")
	}
	if tpl := c.get("ev", `<img src=x onerror=alert(1)>{{room}}`); tpl != nil {
		t.Fatal("a template that does not pass was used")
	}
	good := `<header class="shop">{{title}}</header>{{room}}`
	first := c.get("ev", good)
	if first == nil {
		t.Fatal("a good template was not used")
	}
	if c.get("ev", good) != first {
		t.Error("the same template was parsed again")
	}
	if c.get("ev", good+`<footer>x</footer>`) == first {
		t.Error("a changed template was not parsed again")
	}
	if c.get("ev", "") != nil {
		t.Error("no template, no layout")
	}
}
