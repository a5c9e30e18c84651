package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/auth"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// adminTenant returns the tenant an admin call acts on: its own, or the one
// named by ?tenant= (or tenant in a body). Admins of the default tenant are the
// gate's operators and may name any tenant; other admins only their own.
func adminTenant(c echo.Context, fromBody string) (string, error) {
	a := ActorOf(c)
	t := c.QueryParam("tenant")
	if t == "" {
		t = fromBody
	}
	if t == "" || t == a.Tenant {
		return a.Tenant, nil
	}
	if a.Tenant != auth.DefaultTenant {
		return "", host.Errorf(host.CodeForbidden, "an admin of tenant %q cannot act on tenant %q", a.Tenant, t)
	}
	if !auth.TenantPattern.MatchString(t) {
		return "", badRequest("tenant must match %s", auth.TenantPattern)
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
func (s *Server) putTaskType(c echo.Context) error {
	name := c.Param("name")
	body := struct {
		host.TaskType
		// RetryPolicy is read-only (what GET shows); accepted and ignored so
		// a GET answer can be PUT back.
		RetryPolicy json.RawMessage `json:"retry_policy"`
		// Paused is read-only too: pause and resume have routes of their own.
		Paused json.RawMessage `json:"paused"`
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
	out, err := s.eng.PutTaskType(c.Request().Context(), tt)
	if err != nil {
		return err
	}
	return s.typeAnswer(c, out)
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
// null resets a field to its default.
func (s *Server) patchTaskType(c echo.Context) error {
	tenant, err := adminTenant(c, "")
	if err != nil {
		return err
	}
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
	delete(p, "retry_policy") // read-only, as in PUT
	delete(p, "paused")
	patch, err := json.Marshal(p)
	if err != nil {
		return err
	}
	out, err := s.eng.PatchTaskType(c.Request().Context(), tenant, c.Param("name"), patch)
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
// the secret api_key, shown only this once.
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

// revokeKey is DELETE /v1/admin/keys/{id}.
func (s *Server) revokeKey(c echo.Context) error {
	if err := noBody(c); err != nil {
		return err
	}
	id := c.Param("id")
	ks, err := s.visibleKeys(c)
	if err != nil {
		return err
	}
	for _, k := range ks {
		if k.ID != id {
			continue
		}
		if err := auth.RevokeKey(c.Request().Context(), s.st, id); err != nil {
			return err
		}
		s.authn.Forget()
		return c.JSON(http.StatusOK, map[string]any{"key_id": id, "status": "revoked"})
	}
	return host.Errorf(host.CodeNotFound, "no key %s", id)
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
