package ui_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var (
	formRe   = regexp.MustCompile(`(?is)<form\b([^>]*)>(.*?)</form>`)
	attrRe   = regexp.MustCompile(`(?i)\b(method|action|name|value|type)="([^"]*)"`)
	fieldRe  = regexp.MustCompile(`(?is)<(input|button)\b([^>]*)>`)
	uiHrefRe = regexp.MustCompile(`href="(/ui/[^"]*)"`)
)

func attrs(s string) map[string]string {
	m := map[string]string{}
	for _, a := range attrRe.FindAllStringSubmatch(s, -1) {
		m[strings.ToLower(a[1])] = html.UnescapeString(a[2])
	}
	return m
}

// postForm is a form of a dashboard page as a browser would submit it: its
// hidden and filled fields, unchecked boxes left out, and its first named
// submit button.
type postForm struct {
	action string
	fields url.Values
	page   string
}

// postForms returns the POST forms of page, keyed by action.
func postForms(page, from string, into map[string]postForm) {
	for _, f := range formRe.FindAllStringSubmatch(page, -1) {
		fa := attrs(f[1])
		if !strings.EqualFold(fa["method"], "post") {
			continue
		}
		vals := url.Values{}
		button := false
		for _, in := range fieldRe.FindAllStringSubmatch(f[2], -1) {
			a := attrs(in[2])
			name := a["name"]
			switch {
			case name == "":
			case strings.EqualFold(in[1], "button"):
				if !button {
					vals.Set(name, a["value"])
					button = true
				}
			case a["type"] == "checkbox" || a["type"] == "radio":
			default:
				vals.Add(name, a["value"])
			}
		}
		if _, ok := into[fa["action"]]; !ok {
			into[fa["action"]] = postForm{action: fa["action"], fields: vals, page: from}
		}
	}
}

// TestEveryFormRefusesAPostWithoutItsToken walks the dashboard's pages as an
// operator (every /ui link from the overview on, a queued and a dead task
// among them) and posts every form it finds as its page has it but without
// its CSRF token, then with a wrong one: each is refused 403 naming the
// token, and changes nothing. With the token each form is accepted, so the
// refusals are the token's doing (issue 38 item 6d: only the browser test
// posted forms, and it skips without Chromium).
func TestEveryFormRefusesAPostWithoutItsToken(t *testing.T) {
	b := setup(t)
	dead := b.deadLetter(t)
	queued := b.api(t, "POST", "/v1/tasks", b.agent, map[string]any{"task_type": "echo", "params": map[string]any{"n": 2}})["task_id"].(string)
	br := newBrowser(t, b.ts)
	br.signIn(b.admin)

	forms := map[string]postForm{}
	seen := map[string]bool{}
	queue := []string{"/ui/", "/ui/tasks/" + queued, "/ui/tasks/" + dead}
	for len(queue) > 0 && len(seen) < 200 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] || strings.HasPrefix(p, "/ui/static/") {
			continue
		}
		seen[p] = true
		res, page := br.get(p)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", p, res.StatusCode)
		}
		postForms(page, p, forms)
		for _, m := range uiHrefRe.FindAllStringSubmatch(page, -1) {
			queue = append(queue, html.UnescapeString(m[1]))
		}
	}
	var actions []string
	for a := range forms {
		actions = append(actions, a)
	}
	sort.Strings(actions)
	for _, a := range []string{"/ui/logout", "/ui/tenant", "/ui/find-task", "/ui/tasks/" + queued + "/cancel", "/ui/dead-letters/redrive", "/ui/ledger/verify"} {
		if _, ok := forms[a]; !ok {
			t.Fatalf("the walk of %d pages found no form posting to %s; forms: %v", len(seen), a, actions)
		}
	}

	state := func(id string) any { return b.api(t, "GET", "/v1/tasks/"+id, b.admin, nil)["status"] }
	for _, a := range actions {
		f := forms[a]
		if f.fields.Get("csrf") == "" {
			t.Fatalf("the form posting to %s (on %s) carries no CSRF token: %v", a, f.page, f.fields)
		}
		for name, tok := range map[string]string{"no token": "", "wrong token": f.fields.Get("csrf") + "x"} {
			vals := url.Values{}
			for k, v := range f.fields {
				vals[k] = v
			}
			vals.Del("csrf")
			if tok != "" {
				vals.Set("csrf", tok)
			}
			res, body := br.post(a, vals)
			if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF") {
				t.Errorf("%s to %s (form of %s): %d, want 403 naming the CSRF token\n%.300s", name, a, f.page, res.StatusCode, body)
			}
		}
	}
	// The sign-in form, signed out, with the key filled in.
	anon := newBrowser(t, b.ts)
	_, page := anon.get("/ui/login")
	login := map[string]postForm{}
	postForms(page, "/ui/login", login)
	lf, ok := login["/ui/login"]
	if !ok || lf.fields.Get("csrf") == "" {
		t.Fatalf("the sign-in page has no sign-in form with a token: %v", login)
	}
	for name, tok := range map[string]string{"no token": "", "wrong token": lf.fields.Get("csrf") + "x"} {
		vals := url.Values{"key": {b.admin}}
		if tok != "" {
			vals.Set("csrf", tok)
		}
		if res, body := anon.post("/ui/login", vals); res.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Errorf("sign-in with %s: %d, want 403 naming the CSRF token", name, res.StatusCode)
		}
	}
	if res, _ := anon.get("/ui/"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("a refused sign-in made a session: GET /ui/ answered %d", res.StatusCode)
	}

	if st := state(queued); st != "queued" {
		t.Fatalf("refused posts cancelled the queued task: %v", st)
	}
	if st := state(dead); st != "dead_letter" {
		t.Fatalf("refused posts redrove the dead letter: %v", st)
	}
	if res, _ := br.get("/ui/"); res.StatusCode != http.StatusOK {
		t.Fatalf("refused posts signed the session out: GET /ui/ answered %d", res.StatusCode)
	}

	// With the token every form is accepted (sign-out last).
	sort.SliceStable(actions, func(i, j int) bool { return actions[i] != "/ui/logout" && actions[j] == "/ui/logout" })
	for _, a := range actions {
		res, body := br.post(a, forms[a].fields)
		if res.StatusCode == http.StatusForbidden || res.StatusCode >= 500 {
			t.Errorf("the form posting to %s with its token: %d\n%.300s", a, res.StatusCode, body)
		}
	}
	if st := state(queued); st != "canceled" {
		t.Fatalf("the cancel form with its token left the task %v", st)
	}
}
