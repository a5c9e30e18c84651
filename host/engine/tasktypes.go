package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// compiledType is a task type with its params schema compiled.
type compiledType struct {
	tt      *host.TaskType
	schema  *jsonschema.Schema // nil: any params object
	fetched time.Time
}

type typeCache struct {
	e  *Engine
	mu sync.RWMutex
	m  map[string]*compiledType // tenant + "\x00" + name
}

func newTypeCache(e *Engine) *typeCache { return &typeCache{e: e, m: map[string]*compiledType{}} }

func typeKey(tenant, name string) string { return tenant + "\x00" + name }

func (c *typeCache) get(ctx context.Context, tenant, name string) (*compiledType, error) {
	k := typeKey(tenant, name)
	c.mu.RLock()
	ct := c.m[k]
	c.mu.RUnlock()
	if ct != nil && time.Since(ct.fetched) < c.e.cfg.TaskTypeTTL {
		return ct, nil
	}
	var tt *host.TaskType
	err := c.e.view(ctx, func(r store.Reader) error {
		var err error
		tt, err = r.GetTaskType(ctx, tenant, name)
		return err
	})
	return c.fill(k, tt, err)
}

// getIn is get for code running inside a store transaction: a cache miss reads
// through that transaction, never through a separate view that would hold up
// the writer's whole batch.
func (c *typeCache) getIn(ctx context.Context, r store.Reader, tenant, name string) (*compiledType, error) {
	k := typeKey(tenant, name)
	c.mu.RLock()
	ct := c.m[k]
	c.mu.RUnlock()
	if ct != nil && time.Since(ct.fetched) < c.e.cfg.TaskTypeTTL {
		return ct, nil
	}
	tt, err := r.GetTaskType(ctx, tenant, name)
	return c.fill(k, tt, err)
}

func (c *typeCache) fill(k string, tt *host.TaskType, err error) (*compiledType, error) {
	if err != nil {
		if host.IsCode(err, host.CodeNotFound) {
			_, name, _ := strings.Cut(k, "\x00")
			return nil, host.Errorf(host.CodeUnknownTaskType, "task type %q is not registered", name)
		}
		return nil, err
	}
	schema, err := compileSchema(tt.ParamsSchema)
	if err != nil {
		return nil, err
	}
	ct := &compiledType{tt: tt, schema: schema, fetched: time.Now()}
	c.mu.Lock()
	c.m[k] = ct
	c.mu.Unlock()
	return ct, nil
}

func (c *typeCache) invalidate(tenant, name string) {
	c.mu.Lock()
	delete(c.m, typeKey(tenant, name))
	c.mu.Unlock()
}

// Limits on what a schema and params may be: the validator's cost grows
// quickly with nesting, so depth is bounded before any validation runs.
const (
	MaxSchemaBytes = 64 << 10
	MaxSchemaDepth = 32
	MaxParamsDepth = 32
)

// jsonDepth returns how deeply objects and arrays nest in a JSON text.
func jsonDepth(b []byte) int {
	depth, max := 0, 0
	inStr, esc := false, false
	for _, c := range b {
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
			if depth > max {
				max = depth
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return max
}

// paramsSchemaURL is the URL a task type's params schema is compiled under.
const paramsSchemaURL = "mem://asyncgate/params_schema.json"

// compileSchema compiles a params schema; an empty one accepts any object.
func compileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if len(raw) > MaxSchemaBytes {
		return nil, host.Errorf(host.CodeBadRequest, "params_schema is %d bytes, the limit is %d", len(raw), MaxSchemaBytes)
	}
	if d := jsonDepth(raw); d > MaxSchemaDepth {
		return nil, host.Errorf(host.CodeBadRequest, "params_schema nests %d levels deep, the limit is %d", d, MaxSchemaDepth)
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.LoadURL = func(s string) (io.ReadCloser, error) {
		return nil, fmt.Errorf("remote schema references are not allowed (%s)", s)
	}
	// An absolute URL of its own: a relative one would be resolved against
	// the gate's working directory, which every compile error would then
	// name to the caller (file:///srv/gate/params.json).
	if err := c.AddResource(paramsSchemaURL, bytes.NewReader(raw)); err != nil {
		return nil, host.Errorf(host.CodeBadRequest, "params_schema is not a valid JSON Schema: %v", err)
	}
	s, err := c.Compile(paramsSchemaURL)
	if err != nil {
		return nil, host.Errorf(host.CodeBadRequest, "params_schema does not compile: %v", err)
	}
	return s, nil
}

// validateParams checks params against a compiled schema and returns an
// invalid_params error naming the first problems.
func validateParams(s *jsonschema.Schema, params json.RawMessage) error {
	if !utf8.Valid(params) {
		return host.Errorf(host.CodeInvalidParams, "params are not valid UTF-8")
	}
	if d := jsonDepth(params); d > MaxParamsDepth {
		return host.Errorf(host.CodeInvalidParams, "params nest %d levels deep, the limit is %d", d, MaxParamsDepth)
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return host.Errorf(host.CodeInvalidParams, "params are not valid JSON: %v", err)
	}
	if dec.More() {
		return host.Errorf(host.CodeInvalidParams, "params hold more than one JSON value")
	}
	if _, ok := v.(map[string]any); !ok {
		return host.Errorf(host.CodeInvalidParams, "params must be a JSON object")
	}
	if s == nil {
		return nil
	}
	if err := s.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return host.Errorf(host.CodeInvalidParams, "params fail the task type's schema: %s", flattenValidation(ve))
		}
		return host.Errorf(host.CodeInvalidParams, "params fail the task type's schema: %v", err)
	}
	return nil
}

func flattenValidation(ve *jsonschema.ValidationError) string {
	var parts []string
	var walk func(*jsonschema.ValidationError)
	walk = func(v *jsonschema.ValidationError) {
		if len(v.Causes) == 0 {
			loc := v.InstanceLocation
			if loc == "" {
				loc = "/"
			}
			parts = append(parts, loc+": "+v.Message)
			return
		}
		for _, c := range v.Causes {
			walk(c)
		}
	}
	walk(ve)
	if len(parts) > 5 {
		parts = append(parts[:5], fmt.Sprintf("and %d more", len(parts)-5))
	}
	return strings.Join(parts, "; ")
}

// PutTaskType registers or replaces a task type after filling defaults and
// compiling its params schema (a bad schema is a bad_request).
func (e *Engine) PutTaskType(ctx context.Context, tt host.TaskType) (*host.TaskType, error) {
	if err := tt.Normalize(); err != nil {
		return nil, err
	}
	if _, err := compileSchema(tt.ParamsSchema); err != nil {
		return nil, err
	}
	if len(tt.ParamsSchema) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, tt.ParamsSchema); err == nil {
			tt.ParamsSchema = buf.Bytes()
		}
	}
	if tt.Policy != nil && tt.Policy.Name == "" {
		return nil, host.Errorf(host.CodeBadRequest, "policy needs a name")
	}
	named := make(map[string]bool, len(tt.Validators))
	for i, v := range tt.Validators {
		if v.Name == "" {
			return nil, host.Errorf(host.CodeBadRequest, "every validator needs a name")
		}
		if named[v.Name] {
			return nil, host.Errorf(host.CodeInvalidTaskType, "validators[%d]: validator %q is named twice; name each validator once (one entry, one config)", i, v.Name)
		}
		named[v.Name] = true
	}
	if err := checkEscalateConfig(&tt); err != nil {
		return nil, err
	}
	if c := bytes.TrimSpace(tt.ChannelCfg); len(c) > 0 && string(c) != "null" && c[0] != '{' {
		return nil, host.Errorf(host.CodeBadRequest, "channel_config must be a JSON object")
	}
	if e.cfg.Plugins != nil {
		if _, err := e.cfg.Plugins.Policy(&tt); err != nil {
			return nil, badPlugin(err)
		}
		if _, err := e.cfg.Plugins.Validators(&tt); err != nil {
			return nil, badPlugin(err)
		}
		if _, err := e.cfg.Plugins.Channel(tt.DefaultResultChannel); err != nil {
			return nil, host.Errorf(host.CodeBadRequest, "default_result_channel %q: %s", tt.DefaultResultChannel, host.ErrorDetail(err))
		}
	}
	now := e.now()
	tt.UpdatedAt = now
	err := e.update(ctx, func(tx store.Tx) error {
		old, err := tx.GetTaskType(ctx, tt.Tenant, tt.Name)
		switch {
		case err == nil:
			tt.CreatedAt = old.CreatedAt
		case host.IsCode(err, host.CodeNotFound):
			tt.CreatedAt = now
		default:
			return err
		}
		return tx.PutTaskType(ctx, &tt)
	})
	e.types.invalidate(tt.Tenant, tt.Name)
	// While some type is paused the pause cache holds a snapshot of the
	// registered types (what a lease naming no type is offered): a new type
	// must join it now, not when the snapshot ages out.
	e.pauses.invalidate(tt.Tenant)
	if err != nil {
		return nil, err
	}
	return &tt, nil
}

// checkEscalateConfig refuses an escalate policy whose supervisor (for
// every type, or for one under task_types) is not a principal a key could
// hold, or is the gate's own (GatePrincipal, any case): its escalations
// would go to nobody.
func checkEscalateConfig(tt *host.TaskType) error {
	if tt.Policy == nil || tt.Policy.Name != "escalate" || len(bytes.TrimSpace(tt.Policy.Config)) == 0 {
		return nil
	}
	var c struct {
		Supervisor *string           `json:"supervisor"`
		TaskTypes  map[string]string `json:"task_types"`
	}
	if err := json.Unmarshal(tt.Policy.Config, &c); err != nil {
		return host.Errorf(host.CodeInvalidTaskType, "policy.config of escalate: %v", err)
	}
	if c.Supervisor != nil && !host.ValidPrincipal(*c.Supervisor) {
		return host.Errorf(host.CodeInvalidTaskType, "policy.config.supervisor %q is not a principal (it must match %s)", *c.Supervisor, host.PrincipalPattern)
	}
	if c.Supervisor != nil && strings.EqualFold(*c.Supervisor, GatePrincipal) {
		return host.Errorf(host.CodeInvalidTaskType, "policy.config.supervisor %q names the gate itself (%s), which reads no escalations; name a principal that does", *c.Supervisor, GatePrincipal)
	}
	for typ, sup := range c.TaskTypes {
		if !host.ValidPrincipal(sup) {
			return host.Errorf(host.CodeInvalidTaskType, "policy.config.task_types[%q] %q is not a principal (it must match %s)", typ, sup, host.PrincipalPattern)
		}
		if strings.EqualFold(sup, GatePrincipal) {
			return host.Errorf(host.CodeInvalidTaskType, "policy.config.task_types[%q] %q names the gate itself (%s), which reads no escalations; name a principal that does", typ, sup, GatePrincipal)
		}
	}
	return nil
}

// badPlugin turns a plugin lookup failure while writing a task type into a
// bad_request: the type names something this gate cannot run.
func badPlugin(err error) error {
	switch host.ErrorCode(err) {
	case host.CodeInternal, host.CodeNotFound:
		return host.WrapError(host.CodeBadRequest, err, "plugin configuration: "+host.ErrorDetail(err))
	}
	return err
}

// GetTaskType returns a registered task type.
func (e *Engine) GetTaskType(ctx context.Context, tenant, name string) (*host.TaskType, error) {
	var tt *host.TaskType
	err := e.view(ctx, func(r store.Reader) error {
		var err error
		tt, err = r.GetTaskType(ctx, tenant, name)
		return err
	})
	return tt, err
}

// ListTaskTypes returns a tenant's task types.
func (e *Engine) ListTaskTypes(ctx context.Context, tenant string) ([]*host.TaskType, error) {
	var out []*host.TaskType
	err := e.view(ctx, func(r store.Reader) error {
		var err error
		out, err = r.ListTaskTypes(ctx, tenant)
		return err
	})
	return out, err
}

// PatchTaskType applies a JSON merge patch (RFC 7386) to a registered task
// type and stores the result as PutTaskType does: fields the patch does not
// name keep their values, a null removes a field (it then takes its seed
// default, the value PutTaskType of host.NewTaskType gives it).
// The patch cannot rename the type or move it to another tenant.
func (e *Engine) PatchTaskType(ctx context.Context, tenant, name string, patch json.RawMessage) (*host.TaskType, error) {
	var p map[string]json.RawMessage
	if err := json.Unmarshal(patch, &p); err != nil || p == nil {
		return nil, host.Errorf(host.CodeBadRequest, "a merge patch must be a JSON object")
	}
	for _, f := range []string{"task_type", "tenant", "created_at", "updated_at"} {
		if _, ok := p[f]; ok {
			return nil, host.Errorf(host.CodeBadRequest, "%s cannot be patched", f)
		}
	}
	old, err := e.GetTaskType(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	cur, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	merged, err := mergePatch(cur, patch)
	if err != nil {
		return nil, err
	}
	// The merged document is decoded over the seed defaults, as PUT's body
	// is: a field the patch removed with null takes the value PUT {} gives
	// it (enabled true, default_max_retries 3, …), not Go's zero value.
	tt := host.NewTaskType(old.Name)
	dec := json.NewDecoder(bytes.NewReader(merged))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tt); err != nil {
		return nil, host.Errorf(host.CodeBadRequest, "the patched task type is not valid: %v", err)
	}
	tt.Name, tt.Tenant = old.Name, old.Tenant
	return e.PutTaskType(ctx, tt)
}

// mergePatch applies an RFC 7386 JSON merge patch to a JSON document.
func mergePatch(doc, patch []byte) ([]byte, error) {
	var d, p any
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(patch))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		return nil, host.Errorf(host.CodeBadRequest, "malformed merge patch: %v", err)
	}
	return json.Marshal(mergeValue(d, p))
}

func mergeValue(target, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]any)
	if !ok {
		tm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(tm, k)
			continue
		}
		tm[k] = mergeValue(tm[k], v)
	}
	return tm
}

// DeleteTaskType removes a task type. While the type has queued or leased
// tasks it is refused with conflict (disable it first and let them finish or
// cancel them); finished tasks of the type stay readable.
func (e *Engine) DeleteTaskType(ctx context.Context, tenant, name string) error {
	err := e.update(ctx, func(tx store.Tx) error {
		if _, err := tx.GetTaskType(ctx, tenant, name); err != nil {
			return err
		}
		open, _, err := tx.ListTasks(ctx, store.TaskFilter{Tenant: tenant, Types: []string{name},
			States: []host.TaskState{host.StateWaiting, host.StateQueued, host.StateLeased}, Limit: 1})
		if err != nil {
			return err
		}
		if len(open) > 0 {
			return host.Errorf(host.CodeConflict, "task type %q still has open (waiting, queued or leased) tasks, for example %s; disable it and let them finish or cancel them first", name, open[0].ID)
		}
		if _, err := tx.ResumeTaskType(ctx, tenant, name); err != nil {
			return err // a type registered again later starts unpaused
		}
		return tx.DeleteTaskType(ctx, tenant, name)
	})
	e.types.invalidate(tenant, name)
	e.pauses.invalidate(tenant)
	return err
}
