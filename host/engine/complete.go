package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
	"github.com/asyncgate/asyncgate/sdk/plugin/inline"
)

// CompleteRequest reports success. The result must be locatable: a pointer,
// artifacts or a delivery proof, or a Payload the gate stores through a channel.
type CompleteRequest struct {
	WorkerCall
	Result host.Result
	// Payload, when set, is stored through Result.Channel (or the task type's
	// default channel, or by size) and its pointer and checksum recorded.
	Payload []byte
}

// CompleteResult is the outcome of Complete.
type CompleteResult struct {
	Task      *host.Task `json:"-"`
	Status    string     `json:"status"`
	ReceiptID string     `json:"receipt_id"`
	// Duplicate is set when this lease had already completed with this call.
	Duplicate bool `json:"duplicate"`
}

// completeDedupe is the dedupe key of a task.completed receipt: none for
// a lease id that names its task (host.NewLeaseID), whose completion is
// found among its task's receipts (completedReceipt); "complete:<lease>"
// for a lease id of the older form, which names none. A key costs an entry
// in the ledger's dedupe index on every completion; the task's receipts
// are indexed anyway (RATIONALE.md, "A completion is found through its
// task").
func completeDedupe(leaseID string) string {
	if _, ok := host.LeaseTaskID(leaseID); ok {
		return ""
	}
	return "complete:" + leaseID
}

// completedReceipt returns the task.completed receipt written under
// leaseID, or nil: by the task its lease id names, or by the dedupe key of
// an older lease id (and of completions written before keys were dropped,
// which the task's receipts hold too). A task that succeeded keeps the id
// of the lease that completed it, and nothing leases it again, so the
// task's receipts are read only when its row names leaseID: a lease id
// made up for a task, or one of its earlier leases, costs one read by key,
// not a walk of the task's receipts.
func completedReceipt(ctx context.Context, r store.Reader, tenant, leaseID string) (*host.Receipt, error) {
	taskID, ok := host.LeaseTaskID(leaseID)
	if !ok {
		return r.GetReceiptByDedupe(ctx, tenant, "", "complete:"+leaseID)
	}
	t, err := r.GetTask(ctx, tenant, taskID)
	if host.IsCode(err, host.CodeNotFound) {
		return nil, nil
	}
	if err != nil || t.LeaseID != leaseID || host.FinishedAs(t) != host.StateSucceeded {
		return nil, err
	}
	return completionOf(ctx, r, t)
}

// completionOf returns the task.completed receipt of the succeeded task t,
// written under the lease its row keeps, or nil.
func completionOf(ctx context.Context, r store.Reader, t *host.Task) (*host.Receipt, error) {
	if _, ok := host.LeaseTaskID(t.LeaseID); !ok {
		return r.GetReceiptByDedupe(ctx, t.Tenant, "", "complete:"+t.LeaseID)
	}
	return r.GetLeaseReceipt(ctx, t.Tenant, t.ID, t.LeaseID, host.ReceiptCompleted)
}

var (
	checksumPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,15}:[0-9a-fA-F]{1,128}$`)
	channelPattern  = regexp.MustCompile(`^[a-z0-9][a-z0-9_.\-]{0,63}$`)
)

// Complete marks the leased task succeeded and writes task.completed, which
// discharges the assignment and the acceptance. Completing the same lease again
// returns the first outcome.
func (e *Engine) Complete(ctx context.Context, req CompleteRequest) (*CompleteResult, error) {
	if len(req.Payload) > 0 {
		// The payload is stored only for a live lease. A repeat of a
		// completion that already committed finds the lease gone: it is
		// answered with the first outcome before anything is stored.
		if err := e.storePayload(ctx, &req); err != nil {
			if host.IsCode(err, host.CodeLeaseExpired) {
				if dup := e.completeDuplicate(ctx, req); dup != nil {
					return dup, nil
				}
			}
			return nil, err
		}
	} else if err := e.checkWorkerPointer(req.Result); err != nil {
		return nil, err
	}
	res := req.Result
	res.FromWorker = len(req.Payload) == 0 && res.Pointer != ""
	if !res.Locatable() {
		return nil, host.Errorf(host.CodeNotLocatable, "a success must be locatable: give result_pointer, artifacts or delivery_proof (or a payload to store)")
	}
	if len(res.Artifacts) > host.MaxArtifacts {
		return nil, host.Errorf(host.CodeTooLarge, "%d artifacts, the limit is %d. %s", len(res.Artifacts), host.MaxArtifacts, host.ContractsNotChat)
	}
	if len(res.Pointer) > 8192 || len(res.Checksum) > 200 || len(res.Summary) > 8192 {
		return nil, host.Errorf(host.CodeTooLarge, "result_pointer, result_checksum or summary is too long")
	}
	if res.Checksum != "" && !checksumPattern.MatchString(res.Checksum) {
		return nil, host.Errorf(host.CodeBadRequest, "result_checksum must look like algorithm:hex (sha256:…)")
	}
	if res.Channel != "" && !channelPattern.MatchString(res.Channel) {
		return nil, host.Errorf(host.CodeBadRequest, "result_channel must match %s", channelPattern)
	}
	if m := bytes.TrimSpace(res.Metadata); len(m) > 0 && string(m) != "null" && m[0] != '{' {
		return nil, host.Errorf(host.CodeBadRequest, "metadata must be a JSON object")
	}
	for _, raw := range []*json.RawMessage{&res.Metadata, &res.DeliveryProof} {
		if len(*raw) > 0 {
			c, err := compactJSON(*raw)
			if err != nil {
				return nil, host.Errorf(host.CodeBadRequest, "metadata and delivery_proof must be valid JSON")
			}
			*raw = c
		}
	}
	now := e.now()
	out := &CompleteResult{}
	var leasedAt time.Time
	defer e.leases.drop(req.LeaseID)
	var rsReleased, rsExpired int
	_, err := e.changeLeased(ctx, req.WorkerCall, now, leaseChange{
		reset: func() { rsReleased, rsExpired = 0, 0 },
		prebuild: func(t *host.Task) *leaseWrite {
			// The attempt a success ends is not stored: the succeeded task's
			// row and its task.completed receipt hold it (host.SucceededAttempt).
			at, ref := *t.LeasedAt, refOf(t)
			r, types := completeTask(t, res, now)
			return &leaseWrite{receipts: []*host.Receipt{r}, parents: types, then: func(tx store.Tx, t *host.Task) (err error) {
				if rsReleased, rsExpired, err = e.endTaskResources(ctx, tx, ref); err != nil {
					return err
				}
				leasedAt = at
				out.Task, out.ReceiptID, out.Duplicate = t, r.ID, false
				return nil
			}}
		},
		gone: func(tx store.Tx, t *host.Task, err error) error {
			if host.IsCode(err, host.CodeLeaseExpired) {
				if prev, _ := completedReceipt(ctx, tx, req.Tenant, req.LeaseID); ownOutcome(prev, req.WorkerCall, host.ReceiptCompleted) {
					out.Task, out.ReceiptID, out.Duplicate = t, prev.ID, true
					if t == nil {
						out.Task, _ = tx.GetTask(ctx, prev.Tenant, prev.TaskID)
					}
					return nil
				}
			}
			return err
		},
	})
	if err != nil {
		return nil, err
	}
	out.Status = "completed"
	e.emitTaskResources(out.Task.Tenant, rsReleased, rsExpired)
	if !out.Duplicate {
		e.emit(Event{Kind: EvCompleted, Tenant: out.Task.Tenant, TaskType: out.Task.Type, WorkerID: req.WorkerID, Duration: now.Sub(leasedAt)})
	}
	return out, nil
}

// completeDuplicate returns the first outcome of a completion of this lease
// by this caller, or nil when there is none.
func (e *Engine) completeDuplicate(ctx context.Context, req CompleteRequest) *CompleteResult {
	var out *CompleteResult
	_ = e.view(ctx, func(r store.Reader) error {
		prev, err := completedReceipt(ctx, r, req.Tenant, req.LeaseID)
		if err != nil || !ownOutcome(prev, req.WorkerCall, host.ReceiptCompleted) {
			return err
		}
		t, err := r.GetTask(ctx, prev.Tenant, prev.TaskID)
		if err != nil {
			return err
		}
		out = &CompleteResult{Task: t, Status: "completed", ReceiptID: prev.ID, Duplicate: true}
		return nil
	})
	return out
}

// checkWorkerPointer refuses a result_pointer the worker made up for a
// channel this gate manages. Such a channel's pointers name objects the gate
// stores and later reads with its own grants (a folder, an endpoint's
// credentials), so a pointer is only ever recorded when the gate stored the
// payload itself in this very completion; a pointer naming another task's or
// another tenant's object must not become this task's result. Pointers of
// channels the gate does not have (s3://…, a URL the worker owns) are the
// worker's to give, and inline pointers carry their content.
//
// Whether a channel is the gate's does not hang on its plugin being loaded:
// a gate with a mailbox reads email: pointers back through fetch_task_email
// with its own grants, mail.channel or not, so there an email: pointer from a
// worker is refused (issue 37). A gate without mail cannot read such a
// pointer back: it is the worker's own (seed 001's worker that mailed its
// result itself), recorded as given.
func (e *Engine) checkWorkerPointer(res host.Result) error {
	if res.Pointer == "" {
		return nil
	}
	if err := checkPointerText(res.Pointer); err != nil {
		return err
	}
	prefix, rest, _ := strings.Cut(res.Pointer, ":")
	if strings.HasPrefix(rest, "//") {
		prefix = "" // a URL (http://…, s3://…), not a channel:data pointer
	}
	for _, name := range []string{res.Channel, prefix} {
		// A channel's name, as a URL's scheme, is compared whatever its
		// case: FILE:T-…/… names the file channel as file:T-…/… does.
		if name = strings.ToLower(name); name == "" {
			continue
		}
		if name == "inline" {
			// Its content is the pointer (sdk/plugin/inline, the format
			// the built-in channel writes and reads): one it cannot read
			// would make a success no one can fetch. Checked here, not
			// through the plugin, so a completion costs no plugin call.
			if _, err := inline.Payload(res.Pointer); err != nil {
				return host.Errorf(host.CodeBadRequest, "result_pointer %.40q is no inline pointer (inline: and standard base64) the inline channel can read: send the payload as result or result_base64", res.Pointer)
			}
			continue
		}
		if slices.Contains(storingChannels, name) {
			// Refused whether or not this gate runs the channel now: one
			// configured later would read the pointer with its own grants.
			return host.Errorf(host.CodeForeignPointer, "result_pointer names channel %q, one the gate stores payloads in with its own grants: its pointers are made by the gate when it stores a payload, never taken from a worker; send the payload as result or result_base64", name)
		}
		if name == EmailChannel && e.hasMailbox() {
			return host.Errorf(host.CodeForeignPointer, "result_pointer names channel %q, which is the gate's own: its pointers are made by the gate when it stores a payload, never taken from a worker; send the payload as result or result_base64", name)
		}
		if e.cfg.Plugins == nil {
			continue
		}
		if _, err := e.cfg.Plugins.Channel(name); err == nil {
			return host.Errorf(host.CodeForeignPointer, "result_pointer names channel %q, which this gate manages: its pointers are made by the gate when it stores a payload, never taken from a worker; send the payload as result or result_base64", name)
		}
	}
	return nil
}

// checkPointerText refuses, with bad_request, a worker's result_pointer
// with leading or trailing whitespace or a control or format character
// (a newline, a zero-width space, a direction mark) anywhere: no channel
// writes such a pointer, and " file:T-…/…" would pass for the worker's own
// though it reads as one the gate stored. A pointer of whitespace alone is
// no pointer: the result's locatability check refuses it (not_locatable).
func checkPointerText(p string) error {
	if t := strings.TrimSpace(p); t != p && t != "" {
		return host.Errorf(host.CodeBadRequest, "result_pointer %.40q has leading or trailing whitespace: send the pointer exactly as its channel or store wrote it", p)
	}
	if i := strings.IndexFunc(p, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }); i >= 0 {
		return host.Errorf(host.CodeBadRequest, "result_pointer %.40q has a control or format character at byte %d: send the pointer exactly as its channel or store wrote it", p, i)
	}
	return nil
}

// storingChannels are the built-in channels in which the gate stores
// payloads and reads them back with its own grants (a folder, an endpoint's
// credentials): a worker's pointer naming one is refused even on a gate
// that does not run it (yet).
var storingChannels = []string{"file", "http"}

// hasMailbox reports whether this gate reads mail back (fetch_task_email):
// then email: pointers name messages in its own mailbox.
func (e *Engine) hasMailbox() bool {
	m := e.cfg.Delivery.Mail
	return m != nil && m.CanRead()
}

// completeTask moves a live leased task to succeeded with result res and
// returns the task.completed receipt that records it.
func completeTask(t *host.Task, res host.Result, now time.Time) (*host.Receipt, map[string]host.ReceiptType) {
	parents, types := taskParents(t)
	body := completedBody{
		Artifacts: res.Artifacts, Attempt: t.Attempts + 1, DeliveryProof: res.DeliveryProof,
		LeaseExpiresAt: t.LeaseExpiresAt, LeaseID: t.LeaseID, Metadata: res.Metadata,
		ResultChannel: res.Channel, ResultChecksum: res.Checksum, ResultPointer: res.Pointer,
		Summary: res.Summary, WorkerID: t.WorkerID,
	}
	r := &host.Receipt{
		ID: host.NewID(host.PrefixReceipt), Tenant: t.Tenant, Type: host.ReceiptCompleted,
		From: t.WorkerID, To: t.Recipient, TaskID: t.ID, LeaseID: t.LeaseID, Parents: parents,
		Body: mustJSON(body), DedupeKey: completeDedupe(t.LeaseID), CreatedAt: now,
	}
	t.State, t.UpdatedAt, t.CompletedAt = host.StateSucceeded, now, ptr(now)
	rc := res
	t.Result = &rc
	t.CancelRequested = false
	t.LeaseExpiresAt = nil
	return r, types
}

// completedBody is a task.completed receipt's body. Its fields are in the
// order of their names, with the optional ones omitted when empty: it
// encodes byte for byte as the map of the same keys did (encoding/json sorts
// a map's keys), without the map's reflection and sorting on the completion
// path (TestReceiptBodiesEncodeAsTheirMaps).
type completedBody struct {
	Artifacts      []host.Artifact `json:"artifacts,omitempty"`
	Attempt        int             `json:"attempt"`
	DeliveryProof  json.RawMessage `json:"delivery_proof,omitempty"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
	LeaseID        string          `json:"lease_id"`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
	ResultChannel  string          `json:"result_channel"`
	ResultChecksum string          `json:"result_checksum"`
	ResultPointer  string          `json:"result_pointer"`
	Summary        string          `json:"summary"`
	WorkerID       string          `json:"worker_id"`
}

func compactJSON(raw json.RawMessage) (json.RawMessage, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
