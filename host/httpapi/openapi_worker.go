package httpapi

import (
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/httpapi/openapi"
)

// The worker API's operations in the OpenAPI document (canonical and seed
// spellings).
func init() {
	workers := []string{"worker", "admin"}
	leaseOK := map[int]any{200: LeasesResponse{}, 204: openapi.NoContent}
	openapi.Add(
		openapi.Op{Method: "POST", Path: "/v1/leases", Tag: "worker", Roles: workers, Strict: true, Body: LeaseBody{},
			Summary: "Lease up to max_tasks tasks, long-polling up to wait_seconds; 204 when none", Responses: leaseOK},
		openapi.Op{Method: "POST", Path: "/v1/leases/batch", Tag: "worker", Roles: workers, Strict: true, Body: OutcomesBody{},
			Summary:   "Complete, fail and heartbeat up to 100 leases in one call, each entry answered (and refused) on its own",
			Responses: map[int]any{200: api.OutcomesResponse{}}},
		openapi.Op{Method: "POST", Path: "/v1/leases/:lease_id/accept", Tag: "worker", Roles: workers, Strict: true, Body: LeaseCallBody{},
			Summary: "Accept a leased task (writes the task.accepted receipt)", Responses: map[int]any{200: AcceptResponse{}}},
		openapi.Op{Method: "POST", Path: "/v1/leases/:lease_id/heartbeat", Tag: "worker", Roles: workers, Strict: true, Body: HeartbeatBody{},
			Summary: "Extend a lease and report progress; answers cancel_requested", Responses: map[int]any{200: api.HeartbeatResponse{}}},
		openapi.Op{Method: "POST", Path: "/v1/leases/:lease_id/complete", Tag: "worker", Roles: workers, Strict: true, Body: CompleteBody{},
			Summary: "Complete a leased task with a locatable result or an inline payload", Responses: map[int]any{200: api.CompleteResponse{}}},
		openapi.Op{Method: "POST", Path: "/v1/leases/:lease_id/fail", Tag: "worker", Roles: workers, Strict: true, Body: FailBody{},
			Summary: "Report a failure: retry later or dead letter", Responses: map[int]any{200: api.FailResponse{}}},
		openapi.Op{Method: "POST", Path: "/v1/leases/:lease_id/release", Tag: "worker", Roles: workers, Strict: true, Body: LeaseCallBody{},
			Summary: "Give a lease back without using an attempt", Responses: map[int]any{200: ReleaseResponse{}}},
		openapi.Op{Method: "POST", Path: "/v1/leases/:lease_id/snooze", Tag: "worker", Roles: workers, Strict: true, Body: SnoozeBody{},
			Summary: "Give a lease back until snooze_seconds from now without using an attempt", Responses: map[int]any{200: api.SnoozeResponse{}}},

		openapi.Op{Method: "POST", Path: "/lease", Tag: "worker (seed)", Roles: workers, Body: LeaseBody{},
			Summary: "Lease Protocol: one offer or 204", Responses: map[int]any{200: SeedOffer{}, 204: openapi.NoContent}},
		openapi.Op{Method: "POST", Path: "/lease/:lease_id/heartbeat", Tag: "worker (seed)", Roles: workers, Body: HeartbeatBody{},
			Summary: "Lease Protocol heartbeat", Responses: map[int]any{200: api.HeartbeatResponse{}}},
	)
	for _, prefix := range []string{"/worker", "/workers"} {
		lease := "/lease"
		idle := map[int]any{200: api.TaskEnvelope{}, 204: openapi.NoContent}
		if prefix == "/workers" {
			lease = "/lease_task"
			idle = map[int]any{200: openapi.Schema{"oneOf": []any{
				openapi.Ref(api.TaskEnvelope{}),
				openapi.Schema{"type": "object", "required": []string{"task_id", "message"},
					"properties": map[string]any{"task_id": openapi.Schema{"type": "null"}, "message": openapi.Schema{"type": "string"}}},
			}}}
		}
		tag := "worker (seed " + prefix + ")"
		openapi.Add(
			openapi.Op{Method: "POST", Path: prefix + lease, Tag: tag, Roles: workers, Body: LeaseBody{},
				Summary: "Lease one task as a TaskEnvelope", Responses: idle},
			openapi.Op{Method: "POST", Path: prefix + "/heartbeat", Tag: tag, Roles: workers, Body: HeartbeatBody{},
				Summary: "Heartbeat by task_id and run_id", Responses: map[int]any{200: openapi.Schema{
					"type": "object", "required": []string{"status", "lease_expires_at", "cancel_requested"},
					"properties": map[string]any{"status": openapi.Schema{"const": "ok"},
						"lease_expires_at": openapi.Schema{"type": "string", "format": "date-time"},
						"cancel_requested": openapi.Schema{"type": "boolean"}}}}},
			openapi.Op{Method: "POST", Path: prefix + "/complete", Tag: tag, Roles: workers, Body: CompleteBody{},
				Summary: "Complete by task_id and run_id", Responses: map[int]any{200: openapi.Schema{
					"type": "object", "required": []string{"status", "notification_sent", "notification_id"},
					"properties": map[string]any{"status": openapi.Schema{"type": "string"}, "notification_sent": openapi.Schema{"type": "boolean"},
						"notification_id": openapi.Schema{"type": "string"}, "duplicate": openapi.Schema{"type": "boolean"}}}}},
			openapi.Op{Method: "POST", Path: prefix + "/fail", Tag: tag, Roles: workers, Body: FailBody{},
				Summary: "Fail by task_id and run_id", Responses: map[int]any{200: openapi.Schema{
					"type": "object", "required": []string{"status", "will_retry"},
					"properties": map[string]any{"status": openapi.Schema{"enum": []string{"failed", "dead_letter"}}, "will_retry": openapi.Schema{"type": "boolean"},
						"retry_scheduled_at": openapi.Schema{"type": []string{"string", "null"}, "format": "date-time"},
						"notification_sent":  openapi.Schema{"type": "boolean"}}}}},
		)
	}
}
