package ai

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestOfferedNames: names are distinct and fit the API whatever the tools
// are called, ordinary names stay server__tool, and a tool's name does not
// depend on the order of the tools, nor on a tool named like another's
// hashed name.
func TestOfferedNames(t *testing.T) {
	long := strings.Repeat("t", 70)
	tools := []Tool{
		{Server: "calc", Name: "add"},
		{Server: "a__b", Name: "c"},
		{Server: "a", Name: "b__c"},
		{Server: "a_", Name: "_b__c"},
		{Server: "long", Name: long + "1"},
		{Server: "long", Name: long + "2"},
		{Server: "a", Name: "x.y"},
		{Server: "a", Name: "x/y"},
		{Server: "a", Name: "x y"},
		{Server: "a", Name: "ünïcode"},
	}
	names := offeredNames(tools)
	// A tool named like another's hashed name takes nothing from it.
	squatter := Tool{Server: "long", Name: strings.TrimPrefix(names[4], "long__")}
	withSquatter := offeredNames(append(slices.Clone(tools), squatter))
	if !slices.Equal(withSquatter[:len(tools)], names) {
		t.Errorf("a squatter changed the names: %q, then %q", names, withSquatter)
	}
	valid := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	for _, set := range [][]string{names, withSquatter} {
		seen := map[string]bool{}
		for _, n := range set {
			if !valid.MatchString(n) || seen[n] {
				t.Errorf("name %q: invalid or repeated in %q", n, set)
			}
			seen[n] = true
		}
	}
	if names[0] != "calc__add" {
		t.Errorf("calc/add offered as %q", names[0])
	}
	hashed := regexp.MustCompile(`_[0-9a-f]{8}$`)
	for i, n := range names {
		// calc/add, a_/_b__c (a____b__c) and a/ünïcode (a___n_code) have
		// names of their own; the others collide or are too long.
		if want := !slices.Contains([]int{0, 3, 9}, i); hashed.MatchString(n) != want {
			t.Errorf("%s/%s offered as %q; hashed: %v, want %v", tools[i].Server, tools[i].Name, n, !want, want)
		}
	}
	// Reversed, every tool keeps its name.
	rev := slices.Clone(tools)
	slices.Reverse(rev)
	got := offeredNames(rev)
	slices.Reverse(got)
	if !slices.Equal(got, names) {
		t.Errorf("reversed: %q, want %q", got, names)
	}
	// Alone, a tool whose name is its own is offered as server__tool.
	if n := offeredNames([]Tool{{Server: "a", Name: "x.y"}}); n[0] != "a__x_y" {
		t.Errorf("a/x.y alone offered as %q", n[0])
	}
}
