package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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
//
// Every check of the request itself runs before a payload is stored
// (checkCompletion), so a refused completion leaves nothing behind in a
// channel. A payload stored for a completion that is then refused all the
// same (its lease was lost meanwhile) is released through its channel
// (releaseUnrecorded); one whose write may have committed is kept.
func (e *Engine) Complete(ctx context.Context, req CompleteRequest) (*CompleteResult, error) {
	if err := e.checkCompletion(&req); err != nil {
		return nil, err
	}
	var storedFor string // the task whose payload this call stored, if any
	if len(req.Payload) > 0 {
		// The payload is stored only for a live lease. A repeat of a
		// completion that already committed finds the lease gone: it is
		// answered with the first outcome before anything is stored.
		id, err := e.storePayload(ctx, &req)
		if err != nil {
			if host.IsCode(err, host.CodeLeaseExpired) {
				if dup := e.completeDuplicate(ctx, req); dup != nil {
					return dup, nil
				}
			}
			return nil, err
		}
		storedFor = id
	}
	res := req.Result
	res.FromWorker = len(req.Payload) == 0 && res.Pointer != ""
	out, err := e.complete(ctx, req, res)
	if storedFor != "" && (err != nil || out.Duplicate) {
		// Not recorded: the lease was lost while the payload was stored, the
		// store failed, or a concurrent repeat of this completion recorded
		// its own payload first.
		e.releaseUnrecorded(ctx, req.WorkerCall, storedFor, res, err)
	}
	return out, err
}

// checkCompletion refuses a completion whose fields are bad or contradict
// each other, before anything is stored: a refusal it can decide must never
// leave a payload behind in a channel. It compacts metadata and
// delivery_proof in place.
func (e *Engine) checkCompletion(req *CompleteRequest) error {
	res := &req.Result
	stored := len(req.Payload) > 0
	// Each artifact is judged before the success as a whole: one without
	// its type is that mistake, not an unlocatable success.
	if len(res.Artifacts) > host.MaxArtifacts {
		return host.Errorf(host.CodeTooLarge, "%d artifacts, the limit is %d. %s", len(res.Artifacts), host.MaxArtifacts, host.ContractsNotChat)
	}
	for i, a := range res.Artifacts {
		if strings.TrimSpace(a.Type) == "" {
			return host.Errorf(host.CodeBadRequest, "artifacts[%d].type is required: say what the artifact is (file, url, record, …)", i)
		}
	}
	if stored {
		if res.Pointer != "" {
			return host.Errorf(host.CodeBadRequest, "give result (or result_base64) or result_pointer, not both: the gate records the pointer of the payload it stores")
		}
	} else {
		if err := e.checkWorkerPointer(*res); err != nil {
			return err
		}
		if !res.Locatable() {
			return host.Errorf(host.CodeNotLocatable, "a success must be locatable: give result_pointer, artifacts or delivery_proof (or a payload to store)")
		}
	}
	for _, f := range []struct {
		name  string
		value string
		max   int
	}{{"result_pointer", res.Pointer, maxPointerBytes}, {"result_checksum", res.Checksum, maxChecksumBytes}, {"summary", res.Summary, maxSummaryBytes}} {
		if len(f.value) > f.max {
			return host.Errorf(host.CodeTooLarge, "%s is %d bytes, the limit is %d", f.name, len(f.value), f.max)
		}
	}
	if res.Checksum != "" && !checksumPattern.MatchString(res.Checksum) {
		return host.Errorf(host.CodeBadRequest, "result_checksum must look like algorithm:hex (sha256:…)")
	}
	if stored && res.Checksum != "" {
		if err := checkPayloadChecksum(res.Checksum, req.Payload); err != nil {
			return err
		}
	}
	if res.Channel != "" && !channelPattern.MatchString(res.Channel) {
		return host.Errorf(host.CodeBadRequest, "result_channel must match %s", channelPattern)
	}
	if m := bytes.TrimSpace(res.Metadata); len(m) > 0 && string(m) != "null" && m[0] != '{' {
		return host.Errorf(host.CodeBadRequest, "metadata must be a JSON object")
	}
	for _, raw := range []*json.RawMessage{&res.Metadata, &res.DeliveryProof} {
		if len(*raw) > 0 {
			c, err := compactJSON(*raw)
			if err != nil {
				return host.Errorf(host.CodeBadRequest, "metadata and delivery_proof must be valid JSON")
			}
			*raw = c
		}
	}
	return nil
}

// Limits of a completion's text fields, in bytes.
const (
	maxPointerBytes  = 8192
	maxChecksumBytes = 200
	maxSummaryBytes  = 8192
)

// checkPayloadChecksum refuses a worker's result_checksum given with a
// payload the gate stores: the gate records the payload's sha256 itself, so
// a checksum of another algorithm cannot be checked (bad_request) and a
// sha256 that differs says the payload is not the one the worker meant
// (checksum_mismatch). Neither is dropped in silence for the gate's own.
func checkPayloadChecksum(given string, payload []byte) error {
	algo, digest, _ := strings.Cut(given, ":")
	if algo != "sha256" {
		return host.Errorf(host.CodeBadRequest, "result_checksum %.40q uses %s: with result or result_base64 the gate computes the payload's sha256 itself; give sha256:<64 hex digits> or leave result_checksum out", given, algo)
	}
	sum := sha256.Sum256(payload)
	if have := hex.EncodeToString(sum[:]); !strings.EqualFold(digest, have) {
		return host.Errorf(host.CodeChecksumMismatch, "result_checksum %.80q does not match the payload the gate received (sha256:%s): the payload was altered or the checksum is of something else", given, have)
	}
	return nil
}

// complete records the success res under req's lease.
func (e *Engine) complete(ctx context.Context, req CompleteRequest, res host.Result) (*CompleteResult, error) {
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
