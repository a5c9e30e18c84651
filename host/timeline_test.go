package host

import (
	"encoding/json"
	"testing"
	"time"
)

// TestTimelineNotes: the line a table shows for an event and an attempt.
func TestTimelineNotes(t *testing.T) {
	at := time.Date(2026, 1, 4, 15, 30, 0, 0, time.UTC)
	for _, c := range []struct {
		ev   TimelineEvent
		want string
	}{
		{TimelineEvent{Type: EventProgress, Details: json.RawMessage(`{"percent":40,"message":"four of ten"}`)}, "40% four of ten"},
		{TimelineEvent{Type: EventProgress, Details: json.RawMessage(`{}`)}, ""},
		{TimelineEvent{Type: "task.retry_scheduled", Details: json.RawMessage(`{"error_message":"boom","retry_scheduled_at":"2026-01-04T15:30:00.5Z"}`)},
			"boom · offered again 2026-01-04T15:30:00Z"},
		{TimelineEvent{Type: EventLeaseExpired, Details: json.RawMessage(`{"outcome":"expired","duration_ms":61500}`)}, "expired · held 1m2s"},
		{TimelineEvent{Type: "task.assigned", Details: json.RawMessage(`not json`)}, ""},
		{TimelineEvent{Type: "task.assigned", Time: at, Details: json.RawMessage(`{"available_at":"2026-01-04T15:30:00Z"}`)}, ""},
		{TimelineEvent{Type: "task.assigned", Time: at, Details: json.RawMessage(`{"task_summary":"later","available_at":"2026-01-04T16:00:00Z"}`)},
			"not before 2026-01-04T16:00:00Z"},
		{TimelineEvent{Type: "task.cancel_requested", From: "agent.a", Details: json.RawMessage(`{"reason":"not needed","requested_by":"agent.a","lease_id":"l"}`)},
			"not needed"},
		{TimelineEvent{Type: "task.canceled", From: "w.1", Details: json.RawMessage(`{"error_message":"stopped","reason":"not needed","canceled_by":"agent.a"}`)},
			"stopped · not needed · canceled by agent.a"},
		{TimelineEvent{Type: "task.canceled", From: "agent.a", Details: json.RawMessage(`{"reason":"not needed","canceled_by":"agent.a"}`)},
			"not needed"},
		{TimelineEvent{Type: "task.snoozed", Details: json.RawMessage(`{"snooze_seconds":60,"available_at":"2026-01-04T15:30:00Z"}`)},
			"offered again 2026-01-04T15:30:00Z"},
	} {
		if got := c.ev.Note(); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.ev.Type, c.ev.Details, got, c.want)
		}
	}
	a := Attempt{Error: "upstream said no", ErrorMetadata: json.RawMessage(`{"http_status":502}`), DeadReason: ReasonMaxRetriesExceeded}
	if got, want := a.Note(), `upstream said no · {"http_status":502} · dead letter: max_retries_exceeded`; got != want {
		t.Errorf("attempt note %q, want %q", got, want)
	}
	if got := (Attempt{RetryAt: &at, ErrorMetadata: json.RawMessage(`null`)}).Note(); got != "offered again 2026-01-04T15:30:00Z" {
		t.Errorf("retry note %q", got)
	}
	for ms, want := range map[int64]string{850: "850ms", 4200: "4.2s", 190_000: "3m10s"} {
		if got := HeldText(ms); got != want {
			t.Errorf("HeldText(%d) = %q, want %q", ms, got, want)
		}
	}
}
