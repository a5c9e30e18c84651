package httpapi

import (
	"encoding/json"
	"testing"
)

// TestRetryPolicyRoundTripsAcrossAPluginStateChange: a retry_policy read
// while its policy plugin was refused (its state, note and the default's
// parameters) is still the one in effect once the plugin serves: only the
// configured part (plugin, config, expiry) is compared by a PUT or PATCH.
// A changed plugin or config is still refused.
func TestRetryPolicyRoundTripsAcrossAPluginStateChange(t *testing.T) {
	read := json.RawMessage(`{"plugin":"slowpol","config":{"d":2},"plugin_state":"refused","note":"policy plugin slowpol is not serving (refused): the gate's default policy decides","effective":{"base_seconds":300},"expiry":{"requeue_delay_seconds":30}}`)
	now := json.RawMessage(`{"plugin":"slowpol","config":{"d":2},"plugin_state":"ready","note":"policy plugin slowpol decides each failure","expiry":{"requeue_delay_seconds":30}}`)
	if !sameJSON(configuredPart(read), configuredPart(now)) {
		t.Fatalf("a view read while the plugin was refused no longer round-trips: %s vs %s", configuredPart(read), configuredPart(now))
	}
	for _, edited := range []string{
		`{"plugin":"backoff","config":{"d":2},"plugin_state":"ready","expiry":{"requeue_delay_seconds":30}}`,
		`{"plugin":"slowpol","config":{"d":3},"plugin_state":"ready","expiry":{"requeue_delay_seconds":30}}`,
		`{"plugin":"slowpol","config":{"d":2},"expiry":{"requeue_delay_seconds":31}}`,
	} {
		if sameJSON(configuredPart(json.RawMessage(edited)), configuredPart(now)) {
			t.Fatalf("an edited retry_policy passes as unchanged: %s", edited)
		}
	}
	if got := configuredPart(json.RawMessage(`"x"`)); string(got) != `"x"` {
		t.Fatalf("a value that is not an object: %s", got)
	}
}
