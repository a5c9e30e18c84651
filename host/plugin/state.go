package plugin

import "strings"

// State returns a plugin's state as List describes it ("ready" while a
// version serves; "loading", "refused", "missing", "not_configured",
// "incomplete", "removed"; or
// "unavailable" for a name the registry does not know), the serving
// version's kind, and why nothing serves (the refusal or the missing
// built-in's reason). It changes only when the plugin's state or refusal
// does (List's retry_at says when a retry is due), so a view built on it
// round-trips between two reads.
func (r *Registry) State(name string) (state, kind, detail string) {
	for _, in := range r.List() {
		if in.Name != name {
			continue
		}
		detail = strings.TrimPrefix(in.Refused, "refused: ")
		if in.State != "ready" && in.State != "refused" && in.State != "missing" {
			detail = in.Note
		}
		return in.State, in.Kind, detail
	}
	return "unavailable", "", "no plugin of this name is in the plugins folder or built in"
}
