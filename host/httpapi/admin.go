package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// adminTenant returns the tenant an admin call acts on: the one ?tenant=
// names, else the key's own. Admins of the default tenant are the gate's
// operators and may name any tenant; other admins only their own. A tenant
// in the body (fromBody, "" for none) never chooses it: one that differs
// from it is refused with tenant_mismatch, so a body written for one tenant
// is never applied to another in silence.
func adminTenant(c echo.Context, fromBody string) (string, error) {
	a := ActorOf(c)
	t := c.QueryParam("tenant")
	switch {
	case t == "" || t == a.Tenant:
		t = a.Tenant
	case a.Tenant != auth.DefaultTenant:
		return "", host.Errorf(host.CodeForbidden, "an admin of tenant %q cannot act on tenant %q", a.Tenant, t)
	case !auth.TenantPattern.MatchString(t):
		return "", badRequest("tenant must match %s", auth.TenantPattern)
	}
	if fromBody != "" && fromBody != t {
		return "", host.Errorf(host.CodeTenantMismatch,
			"the body names tenant %q but this call acts on tenant %q (?tenant=, else the key's own): name the tenant with ?tenant=%s, or leave tenant out of the body",
			fromBody, t, fromBody)
	}
	return t, nil
}

// AdminTenant is the tenant an admin route of another door acts on, as for
// the /v1/admin routes of this one: the key's own, or the one ?tenant=
// names. An admin of another tenant than the default naming a tenant not
// its own is refused with forbidden ("cannot act on tenant …").
func AdminTenant(c echo.Context) (string, error) {
	return adminTenant(c, "")
}

// putTaskType is PUT /v1/admin/task-types/{name}: create or replace a task
// type. Fields are host.TaskType's; omitted fields take the seed defaults.
// The fields a GET answer adds (created_at, updated_at, retry_policy,
// paused) are the gate's: a body may carry them, so a GET answer can be
// sent back, only with the stored type's values (checkReadOnly).
func (s *Server) putTaskType(c echo.Context) error {
	name := c.Param("name")
	body := struct {
		host.TaskType
		// The read-only fields, shadowing TaskType's timestamps: kept raw
		// for checkReadOnly, never stored.
		CreatedAt   json.RawMessage `json:"created_at"`
		UpdatedAt   json.RawMessage `json:"updated_at"`
		RetryPolicy json.RawMessage `json:"retry_policy"`
		Paused      json.RawMessage `json:"paused"`
	}{TaskType: host.NewTaskType(name)}
	body.Tenant = ""
	if err := bind(c, &body, strict); err != nil {
		return err
	}
	tt := body.TaskType
	if tt.Name != name {
		return badRequest("task_type in the body (%q) differs from the path (%q)", tt.Name, name)
	}
	tenant, err := adminTenant(c, tt.Tenant)
	if err != nil {
		return err
	}
	tt.Tenant = tenant
	if err := s.checkReadOnly(c, tenant, name, map[string]json.RawMessage{
		"created_at": body.CreatedAt, "updated_at": body.UpdatedAt, "retry_policy": body.RetryPolicy, "paused": body.Paused,
	}, false); err != nil {
		return err
	}
	out, err := s.eng.PutTaskType(c.Request().Context(), tt)
	if err != nil {
		return err
	}
	return s.typeAnswer(c, out)
}

// readOnlyFields are the fields of a task type answer the gate keeps: a PUT
// or PATCH body may repeat them only with the values a GET shows.
var readOnlyFields = []string{"created_at", "updated_at", "retry_policy", "paused"}

// checkReadOnly refuses, with read_only_field, a read-only field of a PUT
// or PATCH body (given: field → raw value; absent or null: not given) whose
// value is not the one the stored type's answer shows: any value for a
// type not registered yet, a paused of a type that is not paused, a
// retry_policy that is not the one in effect. Equal values pass, so a GET
// answer round-trips; they are dropped either way, never stored. With
// mustExist (PATCH) a type not registered is not_found, as without them.
func (s *Server) checkReadOnly(c echo.Context, tenant, name string, given map[string]json.RawMessage, mustExist bool) error {
	var cur map[string]json.RawMessage
	for _, f := range readOnlyFields {
		v := bytes.TrimSpace(given[f])
		if len(v) == 0 || string(v) == "null" {
			continue
		}
		if cur == nil {
			tt, err := s.eng.GetTaskType(c.Request().Context(), tenant, name)
			if host.IsCode(err, host.CodeNotFound) && !mustExist {
				return host.Errorf(host.CodeReadOnlyField, "%s is read-only and task type %q is not registered yet: leave %s out of the body", f, name, f)
			}
			if err != nil {
				return err
			}
			ps, err := s.eng.TaskTypePauses(c.Request().Context(), tenant)
			if err != nil {
				return err
			}
			b, err := json.Marshal(s.typeView(tt, ps))
			if err != nil {
				return err
			}
			if err := json.Unmarshal(b, &cur); err != nil {
				return err
			}
		}
		if f == "retry_policy" {
			// The view's runtime part (the policy plugin's state, and the
			// note and parameters that follow from it) changes without the
			// stored type changing: a GET answer read a moment earlier
			// round-trips; only what is configured is compared.
			v, cur[f] = configuredPart(v), configuredPart(cur[f])
		}
		if !sameJSON(v, cur[f]) {
			what := "the stored value"
			if f == "paused" {
				what = "the pause in force (pause and resume have routes of their own)"
			}
			return host.Errorf(host.CodeReadOnlyField, "%s is read-only: the body may repeat it only as GET shows it (%s), or leave it out", f, what)
		}
	}
	return nil
}

// sameJSON reports whether two JSON values are equal as values: objects
// whatever their key order, numbers whatever their spelling, and two
// RFC 3339 timestamps naming the same instant.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if len(b) == 0 || json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	if xs, ok := x.(string); ok {
		if ys, ok := y.(string); ok {
			xt, err1 := time.Parse(time.RFC3339Nano, xs)
			yt, err2 := time.Parse(time.RFC3339Nano, ys)
			if err1 == nil && err2 == nil {
				return xt.Equal(yt)
			}
		}
	}
	return reflect.DeepEqual(x, y)
}

// TaskTypeView is a task type as the admin API shows it: its fields, the
// retry policy in effect, and its pause when its leasing is paused.
type TaskTypeView struct {
	*host.TaskType
	RetryPolicy engine.RetryPolicyView `json:"retry_policy"`
	// Paused is set while the type's leasing is paused (enqueue is still
	// accepted; no worker is offered its tasks).
	Paused *store.TaskTypePause `json:"paused,omitempty"`
}

func (s *Server) typeView(tt *host.TaskType, pauses []store.TaskTypePause) TaskTypeView {
	v := TaskTypeView{TaskType: tt, RetryPolicy: s.eng.RetryPolicy(tt)}
	for i := range pauses {
		if pauses[i].TaskType == tt.Name {
			v.Paused = &pauses[i]
		}
	}
	return v
}

// typeAnswer answers with one task type's view.
func (s *Server) typeAnswer(c echo.Context, tt *host.TaskType) error {
	ps, err := s.eng.TaskTypePauses(c.Request().Context(), tt.Tenant)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.typeView(tt, ps))
}

// patchTaskType is PATCH /v1/admin/task-types/{name}: a JSON merge patch
// (RFC 7386) of the task type. Fields the patch leaves out keep their values;
// null resets a field to its default (the value PUT {} gives it). The
// fields it cannot change (task_type, tenant and the read-only ones) may
// only repeat their current values, so a GET answer can be sent as a patch.
func (s *Server) patchTaskType(c echo.Context) error {
	b, err := readBody(c)
	if err != nil {
		return err
	}
	var p map[string]json.RawMessage
	if err := decodeBody(b, &p, lenient); err != nil {
		return err
	}
	if p == nil {
		return badRequest("the request body must be a JSON merge patch object")
	}
	var bodyTenant string
	if v, ok := p["tenant"]; ok {
		if json.Unmarshal(v, &bodyTenant) != nil {
			return badRequest("field tenant must be a string")
		}
		delete(p, "tenant")
	}
	tenant, err := adminTenant(c, bodyTenant)
	if err != nil {
		return err
	}
	name := c.Param("name")
	if v, ok := p["task_type"]; ok {
		var n string
		if json.Unmarshal(v, &n) != nil || n != name {
			return badRequest("task_type in the body (%s) differs from the path (%q): a patch cannot rename a task type", v, name)
		}
		delete(p, "task_type")
	}
	given := map[string]json.RawMessage{}
	for _, f := range readOnlyFields {
		if v, ok := p[f]; ok {
			given[f] = v
			delete(p, f)
		}
	}
	if err := s.checkReadOnly(c, tenant, name, given, true); err != nil {
		return err
	}
	patch, err := json.Marshal(p)
	if err != nil {
		return err
	}
	out, err := s.eng.PatchTaskType(c.Request().Context(), tenant, name, patch)
	if err != nil {
		return err
	}
	return s.typeAnswer(c, out)
}

// deleteTaskType is DELETE /v1/admin/task-types/{name}: 409 conflict while
// the type has queued or leased tasks.
func (s *Server) deleteTaskType(c echo.Context) error {
	tenant, err := adminTenant(c, "")
	if err != nil {
		return err
	}
	if err := noBody(c); err != nil {
		return err
	}
	name := c.Param("name")
	if err := s.eng.DeleteTaskType(c.Request().Context(), tenant, name); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"task_type": name, "tenant": tenant, "status": "deleted"})
}

// getTaskType is GET /v1/admin/task-types/{name}.
func (s *Server) getTaskType(c echo.Context) error {
	tenant, err := adminTenant(c, "")
	if err != nil {
		return err
	}
	tt, err := s.eng.GetTaskType(c.Request().Context(), tenant, c.Param("name"))
	if err != nil {
		return err
	}
	return s.typeAnswer(c, tt)
}

// listTaskTypes is GET /v1/admin/task-types.
func (s *Server) listTaskTypes(c echo.Context) error {
	tenant, err := adminTenant(c, "")
	if err != nil {
		return err
	}
	tts, err := s.eng.ListTaskTypes(c.Request().Context(), tenant)
	if err != nil {
		return err
	}
	ps, err := s.eng.TaskTypePauses(c.Request().Context(), tenant)
	if err != nil {
		return err
	}
	views := make([]TaskTypeView, len(tts))
	for i, tt := range tts {
		views[i] = s.typeView(tt, ps)
	}
	return c.JSON(http.StatusOK, map[string]any{"task_types": views})
}

// PauseBody is the body of a pause (optional).
type PauseBody struct {
	Reason string `json:"reason,omitempty"`
}

// PauseResponse is the answer of a pause or a resume.
type PauseResponse struct {
	TaskType string `json:"task_type"`
	Tenant   string `json:"tenant"`
	// Status is "paused" or "resumed".
	Status string `json:"status"`
	// Paused is the pause in force (after a pause).
	Paused *store.TaskTypePause `json:"paused,omitempty"`
	// WasPaused says whether a resume ended a pause (false: it was not
	// paused).
	WasPaused *bool `json:"was_paused,omitempty"`
}

// pauseTaskType is POST /v1/admin/task-types/{name}/pause: lease calls
// skip the type's tasks until it is resumed; enqueue still accepts them.
// Pausing a paused type keeps its first pause.
func (s *Server) pauseTaskType(c echo.Context) error {
	tenant, err := adminTenant(c, "")
	if err != nil {
		return err
	}
	var b PauseBody
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	p, err := s.eng.PauseTaskType(c.Request().Context(), tenant, c.Param("name"), ActorOf(c).Principal, b.Reason)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, PauseResponse{TaskType: p.TaskType, Tenant: tenant, Status: "paused", Paused: p})
}

// resumeTaskType is POST /v1/admin/task-types/{name}/resume: the type's
// tasks are offered again. Resuming a type that is not paused is a no-op.
func (s *Server) resumeTaskType(c echo.Context) error {
	tenant, err := adminTenant(c, "")
	if err != nil {
		return err
	}
	var b struct{}
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	was, err := s.eng.ResumeTaskType(c.Request().Context(), tenant, c.Param("name"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, PauseResponse{TaskType: c.Param("name"), Tenant: tenant, Status: "resumed", WasPaused: &was})
}

// createKey is POST /v1/admin/keys {"role", "principal", "tenant"}: 201 with
// the secret api_key, shown only this once. The key's tenant is the call's
// (?tenant=, else the admin's own); a body tenant may only repeat it.
func (s *Server) createKey(c echo.Context) error {
	var b auth.NewKeyRequest
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	tenant, err := adminTenant(c, b.Tenant)
	if err != nil {
		return err
	}
	b.Tenant = tenant
	k, err := auth.CreateKey(c.Request().Context(), s.st, b)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, k)
}

// visibleKeys lists the keys an admin may manage: every key for an operator
// (default tenant) unless ?tenant= narrows it, else its own tenant's.
func (s *Server) visibleKeys(c echo.Context) ([]store.Key, error) {
	a := ActorOf(c)
	ks, err := auth.ListKeys(c.Request().Context(), s.st)
	if err != nil {
		return nil, err
	}
	want := c.QueryParam("tenant")
	if a.Tenant != auth.DefaultTenant {
		if want != "" && want != a.Tenant {
			return nil, host.Errorf(host.CodeForbidden, "an admin of tenant %q cannot list tenant %q", a.Tenant, want)
		}
		want = a.Tenant
	}
	out := ks[:0]
	for _, k := range ks {
		if want == "" || k.Tenant == want {
			out = append(out, k)
		}
	}
	return out, nil
}

// listKeys is GET /v1/admin/keys (hashes are never shown).
func (s *Server) listKeys(c echo.Context) error {
	ks, err := s.visibleKeys(c)
	if err != nil {
		return err
	}
	if ks == nil {
		ks = []store.Key{}
	}
	return c.JSON(http.StatusOK, map[string]any{"keys": ks})
}

// revokeKey is DELETE /v1/admin/keys/{id}: it acts in the tenant every
// admin route acts on (?tenant=, else the key's own), so an operator
// revoking another tenant's key names it with ?tenant=; a key of another
// tenant is 404, as an unknown one.
func (s *Server) revokeKey(c echo.Context) error {
	tenant, err := adminTenant(c, "")
	if err != nil {
		return err
	}
	if err := noBody(c); err != nil {
		return err
	}
	id := c.Param("id")
	ks, err := auth.ListKeys(c.Request().Context(), s.st)
	if err != nil {
		return err
	}
	for _, k := range ks {
		if k.ID != id || k.Tenant != tenant {
			continue
		}
		if err := auth.RevokeKey(c.Request().Context(), s.st, id); err != nil {
			return err
		}
		s.authn.Forget()
		return c.JSON(http.StatusOK, map[string]any{"key_id": id, "status": "revoked"})
	}
	return host.Errorf(host.CodeNotFound, "no key %s in tenant %q", id, tenant)
}

// deadLetters is GET /v1/admin/dead-letters?cursor=&limit=.
func (s *Server) deadLetters(c echo.Context) error {
	tenant, err := adminTenant(c, "")
	if err != nil {
		return err
	}
	limit, err := queryInt(c, "limit", 0)
	if err != nil {
		return err
	}
	ts, cur, err := s.eng.DeadLetters(c.Request().Context(), tenant, c.QueryParam("cursor"), limit)
	if err != nil {
		return err
	}
	if ts == nil {
		ts = []*host.Task{}
	}
	return c.JSON(http.StatusOK, TaskList{Tasks: ts, Cursor: cur})
}

// redrive is POST /v1/admin/dead-letters/{task_id}/redrive.
func (s *Server) redrive(c echo.Context) error {
	tenant, err := adminTenant(c, "")
	if err != nil {
		return err
	}
	if err := noBody(c); err != nil {
		return err
	}
	a := ActorOf(c)
	t, err := s.eng.Redrive(c.Request().Context(), engine.Actor{Tenant: tenant, Principal: a.Principal, Role: engine.RoleAdmin}, c.Param("task_id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}

// listWorkers is GET /v1/admin/workers: the workers seen, with their leases.
func (s *Server) listWorkers(c echo.Context) error {
	tenant, err := adminTenant(c, "")
	if err != nil {
		return err
	}
	ws, err := s.eng.Workers(c.Request().Context(), tenant)
	if err != nil {
		return err
	}
	if ws == nil {
		ws = []engine.WorkerInfo{}
	}
	return c.JSON(http.StatusOK, map[string]any{"workers": ws})
}

// configuredPart is a retry_policy view without its runtime part
// (plugin_state, note, effective), which follows the policy plugin's state;
// raw unchanged when it is not a JSON object.
func configuredPart(raw json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return raw
	}
	delete(m, "plugin_state")
	delete(m, "note")
	delete(m, "effective")
	b, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return b
}
