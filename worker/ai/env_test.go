package ai

import (
	"slices"
	"strings"
	"testing"
)

// A stdio MCP server inherits what a program needs (PATH, HOME, the locale)
// and the entries its configuration names, never the keys in the worker's
// environment: a tool the model drives could read them back into a result.
func TestStdioServerEnvironmentHoldsNoSecrets(t *testing.T) {
	worker := []string{"PATH=/usr/bin", "HOME=/home/w", "LC_ALL=C.UTF-8", "AI_API_KEY=sk-PROVIDER", "OPENAI_API_KEY=sk-OPENAI",
		"ASYNCGATE_KEY=agw_WORKER", "ASYNCGATE_ADMIN_KEY=agw_ADMIN", "GATE_AGENT_KEY=agw_AGENT", "PATHX=no"}
	got := stdioEnv(worker, []string{"ROOT=/srv/docs"})
	for _, kv := range got {
		if strings.Contains(kv, "sk-") || strings.Contains(kv, "agw_") || strings.HasPrefix(kv, "PATHX=") {
			t.Errorf("a stdio server would inherit %q", kv)
		}
	}
	for _, want := range []string{"PATH=/usr/bin", "HOME=/home/w", "LC_ALL=C.UTF-8", "ROOT=/srv/docs"} {
		if !slices.Contains(got, want) {
			t.Errorf("a stdio server's environment %v lacks %q", got, want)
		}
	}
}

// Only ${NAME} reads the environment; any other "$" is kept.
func TestExpandEnvReadsOnlyBracedNames(t *testing.T) {
	t.Setenv("AG_TEST_SECRET", "s3cret")
	for in, want := range map[string]string{
		"Bearer ${AG_TEST_SECRET}":           "Bearer s3cret",
		"pa$$word":                           "pa$$word",
		"$AG_TEST_SECRET":                    "$AG_TEST_SECRET",
		"${AG_TEST_UNSET_XYZ}-x":             "-x",
		"a ${unclosed":                       "a ${unclosed",
		"${AG_TEST_SECRET}${AG_TEST_SECRET}": "s3crets3cret",
	} {
		if got := expandEnv(in); got != want {
			t.Errorf("expandEnv(%q) = %q, want %q", in, got, want)
		}
	}
}
