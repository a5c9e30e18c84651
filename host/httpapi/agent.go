package httpapi

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/api"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// enqueue is POST /v1/tasks: the spec's queue_task with its rich
// acknowledgement. 201 for a new task, 200 for a duplicate idempotency key.
func (s *Server) enqueue(c echo.Context) error {
	var req engine.EnqueueRequest
	if err := bind(c, &req, strict); err != nil {
		return err
	}
	res, err := s.eng.Enqueue(c.Request().Context(), ActorOf(c), req)
	if err != nil {
		return enqueueAdvice(err, req.IdempotencyKey)
	}
	status := http.StatusCreated
	if res.IsDuplicate {
		status = http.StatusOK
	}
	return c.JSON(status, res)
}

// TaskList is a page of tasks.
type TaskList struct {
	Tasks  []*host.Task `json:"tasks"`
	Cursor string       `json:"cursor"`
}

// splitList reads a query parameter given as a comma list, repeated, or both.
func splitList(c echo.Context, name string) []string {
	var out []string
	for _, v := range c.QueryParams()[name] {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// listTasks is GET /v1/tasks?status=&task_type=&recipient_ai=&cursor=&limit=.
func (s *Server) listTasks(c echo.Context) error {
	limit, err := queryInt(c, "limit", 0)
	if err != nil {
		return err
	}
	f := store.TaskFilter{Types: splitList(c, "task_type"), Recipient: c.QueryParam("recipient_ai"), Cursor: c.QueryParam("cursor"), Limit: limit}
	for _, st := range splitList(c, "status") {
		f.States = append(f.States, host.TaskState(st))
	}
	ts, cur, err := s.eng.ListTasks(c.Request().Context(), ActorOf(c), f)
	if err != nil {
		return err
	}
	if ts == nil {
		ts = []*host.Task{}
	}
	return c.JSON(http.StatusOK, TaskList{Tasks: ts, Cursor: cur})
}

// getTask is GET /v1/tasks/{id}.
func (s *Server) getTask(c echo.Context) error {
	t, err := s.eng.GetTask(c.Request().Context(), ActorOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}

// progress is GET /v1/tasks/{id}/progress: the progress history, newest first.
func (s *Server) progress(c echo.Context) error {
	limit, err := queryInt(c, "limit", 0)
	if err != nil {
		return err
	}
	t, ps, err := s.eng.Progress(c.Request().Context(), ActorOf(c), c.Param("id"), limit)
	if err != nil {
		return err
	}
	if ps == nil {
		ps = []store.Progress{}
	}
	return c.JSON(http.StatusOK, api.ProgressResponse{TaskID: t.ID, Status: t.State, ProgressPercent: t.ProgressPercent, ProgressMessage: t.ProgressMessage, Progress: ps})
}

// cancel is POST /v1/tasks/{id}/cancel with an optional {"reason": …}.
func (s *Server) cancel(c echo.Context) error {
	var b struct {
		Reason string `json:"reason,omitempty"`
	}
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	t, err := s.eng.Cancel(c.Request().Context(), ActorOf(c), c.Param("id"), b.Reason)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}

// streamThreshold is the payload size above which a result is streamed
// from its channel to the client instead of being read whole first.
const streamThreshold = 1 << 20

// streamStall is how long one chunk of a streamed result may take to write.
const streamStall = 60 * time.Second

// progressWriter moves the connection's write deadline forward before each
// write, so a stream is cut only when it stalls, not when it is long.
type progressWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (p progressWriter) Write(b []byte) (int, error) {
	_ = p.rc.SetWriteDeadline(time.Now().Add(streamStall))
	return p.w.Write(b)
}

// fetchResult is GET /v1/tasks/{id}/result: the payload fetched back through
// its result channel, with the checksum verified. A payload up to 1 MiB comes
// as content (JSON) or content_base64; a larger one is streamed from the
// channel as content_base64, with checksum_valid after it, so the gate never
// holds it whole. A read that fails mid-way aborts the response, which the
// client sees as a truncated body, never as a complete answer. With
// ?lease_id= a worker reads the result of a task its live lease's task
// waits (or waited) on (engine.OpenDependencyResult).
func (s *Server) fetchResult(c echo.Context) error {
	var rs *engine.ResultStream
	var err error
	if lease := c.QueryParam("lease_id"); lease != "" || c.QueryParams().Has("lease_id") {
		// A worker reads what the task of its live lease waited on.
		var call engine.WorkerCall
		if call, err = workerCall(c, lease, "", "", false); err != nil {
			return err
		}
		rs, err = s.eng.OpenDependencyResult(c.Request().Context(), call, c.Param("id"))
	} else {
		rs, err = s.eng.OpenResult(c.Request().Context(), ActorOf(c), c.Param("id"))
	}
	if err != nil {
		return err
	}
	defer rs.Close()
	out := api.ResultResponse{TaskID: rs.Task.ID, Channel: rs.Channel, ResultPointer: rs.Pointer}
	if r := rs.Task.Result; r != nil {
		out.ResultChecksum, out.Summary, out.Metadata = r.Checksum, r.Summary, r.Metadata
		out.Artifacts, out.DeliveryProof, out.ArchivedAt = r.Artifacts, r.DeliveryProof, r.ArchivedAt
	}
	if rs.Empty() {
		return c.JSON(http.StatusOK, out)
	}
	if rs.Size <= streamThreshold {
		b, err := io.ReadAll(rs)
		if err != nil {
			return host.WrapError(host.CodeChannelError, err, "result channel "+rs.Channel+" failed while reading: "+err.Error())
		}
		out.ChecksumValid = rs.ChecksumValid()
		if len(b) > 0 {
			if json.Valid(b) {
				out.Content = b
			} else {
				out.ContentBase64 = base64.StdEncoding.EncodeToString(b)
			}
		}
		return c.JSON(http.StatusOK, out)
	}
	head, err := json.Marshal(out)
	if err != nil {
		return err
	}
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	w.WriteHeader(http.StatusOK)
	// The server's write timeout bounds a whole answer; a large result to a
	// slow client may take longer, so the deadline moves with progress
	// instead: each chunk must be written within streamStall.
	bw := bufio.NewWriterSize(progressWriter{w: w, rc: http.NewResponseController(w)}, 64<<10)
	bw.Write(head[:len(head)-1]) // the object without its closing brace
	bw.WriteString(`,"content_base64":"`)
	enc := base64.NewEncoder(base64.StdEncoding, bw)
	if _, err := io.Copy(enc, rs); err != nil {
		s.log.Warn("result stream failed", "task_id", rs.Task.ID, "channel", rs.Channel, "err", err)
		panic(http.ErrAbortHandler) // the status is sent: cut the body short
	}
	enc.Close()
	bw.WriteString(`"`)
	if v := rs.ChecksumValid(); v != nil {
		bw.WriteString(`,"checksum_valid":` + strconv.FormatBool(*v))
	}
	bw.WriteString("}\n")
	return bw.Flush()
}

// archive is POST /v1/tasks/{id}/archive: the channel's ack, then archived_at.
func (s *Server) archive(c echo.Context) error {
	if err := noBody(c); err != nil {
		return err
	}
	t, err := s.eng.ArchiveResult(c.Request().Context(), ActorOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	out := map[string]any{"task_id": t.ID, "status": "archived"}
	if t.Result != nil {
		out["archived_at"] = t.Result.ArchivedAt
	}
	return c.JSON(http.StatusOK, out)
}

// openObligations is GET /v1/obligations/open?principal=&role=&limit=&cursor=
// (principal_id is accepted for principal).
func (s *Server) openObligations(c echo.Context) error {
	limit, err := queryInt(c, "limit", 0)
	if err != nil {
		return err
	}
	a := ActorOf(c)
	f := store.ObligationFilter{Principal: c.QueryParam("principal"), Role: c.QueryParam("role"), Cursor: c.QueryParam("cursor"), Limit: limit}
	if f.Principal == "" {
		f.Principal = c.QueryParam("principal_id")
	}
	obs, cur, err := s.eng.OpenObligations(c.Request().Context(), a, f)
	if err != nil {
		return err
	}
	if obs == nil {
		obs = []host.Obligation{}
	}
	who := f.Principal
	if who == "" {
		who = a.Principal
	}
	return c.JSON(http.StatusOK, api.ObligationsResponse{
		Server:          api.ServerInfo{Name: "asyncgate", Version: s.cfg.Version, Time: s.eng.Clock().Now().UTC(), Driver: s.st.Driver()},
		Relationship:    api.Relationship{Tenant: a.Tenant, Principal: who, Role: f.Role, CallerRole: a.Role},
		OpenObligations: obs, Cursor: cur,
	})
}

// ReceiptList is a page of receipts.
type ReceiptList struct {
	Receipts []*host.Receipt `json:"receipts"`
	Cursor   string          `json:"cursor"`
}

// listReceipts is GET /v1/receipts?task_id=&cursor=&limit=.
func (s *Server) listReceipts(c echo.Context) error {
	taskID := c.QueryParam("task_id")
	if taskID == "" {
		return badRequest("task_id is required")
	}
	limit, err := queryInt(c, "limit", 0)
	if err != nil {
		return err
	}
	rs, cur, err := s.eng.TaskReceipts(c.Request().Context(), ActorOf(c), taskID, c.QueryParam("cursor"), limit)
	if err != nil {
		return err
	}
	if rs == nil {
		rs = []*host.Receipt{}
	}
	return c.JSON(http.StatusOK, ReceiptList{Receipts: rs, Cursor: cur})
}

// getReceipt is GET /v1/receipts/{id}.
func (s *Server) getReceipt(c echo.Context) error {
	rc, term, err := s.eng.GetReceipt(c.Request().Context(), ActorOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.ReceiptResponse{Receipt: rc, TerminatedBy: term})
}

// chain is GET /v1/receipts/{id}/chain: the receipt and its ancestors, nearest first.
func (s *Server) chain(c echo.Context) error {
	links, err := s.eng.Chain(c.Request().Context(), ActorOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	if links == nil {
		links = []engine.ChainLink{}
	}
	return c.JSON(http.StatusOK, map[string]any{"receipt_id": c.Param("id"), "chain": links})
}

// checkTerminator is POST /v1/receipts/check-terminator {"parent_receipt_id": …}.
func (s *Server) checkTerminator(c echo.Context) error {
	var b struct {
		ParentReceiptID string `json:"parent_receipt_id"`
	}
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	if b.ParentReceiptID == "" {
		return badRequest("parent_receipt_id is required")
	}
	res, err := s.eng.CheckTerminator(c.Request().Context(), ActorOf(c), b.ParentReceiptID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, res)
}

// AppendReceiptBody is the body of POST /v1/receipts.
type AppendReceiptBody struct {
	ReceiptType host.ReceiptType `json:"receipt_type"`
	To          string           `json:"to,omitempty"`
	TaskID      string           `json:"task_id,omitempty"`
	Parents     []string         `json:"parents,omitempty"`
	Body        rawObject        `json:"body,omitempty"`
	DedupeKey   string           `json:"dedupe_key,omitempty"`
}

// appendReceipt is POST /v1/receipts: a principal appends a receipt (progress
// or escalation) under the ledger's invariants; it ends no obligation (a
// parent it would end is 403 forbidden: engine.AppendReceipt). 201, or 200
// for a repeated dedupe_key.
func (s *Server) appendReceipt(c echo.Context) error {
	var b AppendReceiptBody
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	if b.ReceiptType == "" {
		return badRequest("receipt_type is required")
	}
	rc, dup, err := s.eng.AppendReceipt(c.Request().Context(), ActorOf(c), engine.AppendRequest{
		Type: b.ReceiptType, To: b.To, TaskID: b.TaskID, Parents: b.Parents, Body: []byte(b.Body), DedupeKey: b.DedupeKey,
	})
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if dup {
		status = http.StatusOK
	}
	return c.JSON(status, api.ReceiptResponse{Receipt: rc, Duplicate: dup})
}
