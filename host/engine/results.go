package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// ResultOpener is a channel that can stream a stored payload instead of
// returning it whole (the built-in file channel reads its folder directly).
// ok is false when it cannot stream this pointer; the engine then uses Get.
type ResultOpener interface {
	OpenResult(ctx context.Context, taskID, pointer string) (rc io.ReadCloser, size int64, ok bool, err error)
}

// Defaults of the result fetch limits (Config.MaxResultGets, MaxResultStreams, ResultQueueWait).
const (
	DefaultMaxResultGets    = 4
	DefaultMaxResultStreams = 64
	DefaultResultQueueWait  = 10 * time.Second
)

// smallResult is the largest payload size a channel may declare and still
// be fetched without waiting for a slot.
const smallResult = 1 << 20

// slots is a counting semaphore with a bounded wait.
type slots chan struct{}

// take waits up to wait for a slot; it answers busy (503 with Retry-After)
// when none frees up in time.
func (s slots) take(ctx context.Context, wait time.Duration, what string) (func(), error) {
	select {
	case s <- struct{}{}:
		return func() { <-s }, nil
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case s <- struct{}{}:
		return func() { <-s }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, host.Errorf(host.CodeBusy, "%d %s are being fetched already; try again in a moment", cap(s), what)
	}
}

// FetchedResult is a succeeded task's payload fetched back through its channel.
type FetchedResult struct {
	Task          *host.Task `json:"-"`
	Channel       string     `json:"channel"`
	Pointer       string     `json:"result_pointer"`
	Content       []byte     `json:"-"`
	ChecksumValid *bool      `json:"checksum_valid,omitempty"`
}

// FetchResult gets a visible succeeded task's payload through its channel,
// whole, and verifies the checksum when one was recorded. Doors that can
// send a payload as they read it use OpenResult instead.
func (e *Engine) FetchResult(ctx context.Context, actor Actor, id string) (*FetchedResult, error) {
	rs, err := e.openResult(ctx, actor, id, true)
	e.fetched(ctx, actor, rs, err)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := &FetchedResult{Task: rs.Task, Channel: rs.Channel, Pointer: rs.Pointer}
	if rs.Empty() {
		return out, nil
	}
	var b []byte
	if br, ok := rs.r.(*bytes.Reader); ok && rs.hash == nil {
		b = make([]byte, br.Len())
		_, err = io.ReadFull(br, b)
	} else {
		b, err = io.ReadAll(rs)
	}
	if err != nil {
		return nil, host.WrapError(host.CodeChannelError, err, "result channel "+rs.Channel+" failed while reading: "+err.Error())
	}
	out.Content = b
	out.ChecksumValid = rs.ChecksumValid()
	return out, nil
}

// ResultStream is a succeeded task's payload being read from its channel.
// Read it to the end, then ChecksumValid says whether it matched the
// recorded checksum; Close it in any case (it holds a fetch slot).
type ResultStream struct {
	Task    *host.Task
	Channel string
	Pointer string
	// Size is the payload's length in bytes.
	Size int64

	r       io.Reader
	closer  io.Closer
	release func()
	hash    hash.Hash
	want    string
	read    int64
	eof     bool
}

// Empty reports whether there is no payload to read: the result is located
// by artifacts or a delivery proof only.
func (s *ResultStream) Empty() bool { return s.r == nil }

// Read implements io.Reader.
func (s *ResultStream) Read(p []byte) (int, error) {
	if s.r == nil {
		return 0, io.EOF
	}
	n, err := s.r.Read(p)
	if n > 0 {
		s.read += int64(n)
		if s.hash != nil {
			s.hash.Write(p[:n])
		}
	}
	if err == io.EOF {
		s.eof = true
	}
	return n, err
}

// ChecksumValid reports, once the payload was read to its end, whether it
// matched the recorded sha256 checksum; nil when none was recorded or the
// payload was not read to the end.
func (s *ResultStream) ChecksumValid() *bool {
	if s.hash == nil || !s.eof {
		return nil
	}
	valid := strings.EqualFold(hex.EncodeToString(s.hash.Sum(nil)), s.want)
	return &valid
}

// Close releases the payload and the fetch slot. It may be called twice.
func (s *ResultStream) Close() error {
	var err error
	if s.closer != nil {
		err = s.closer.Close()
		s.closer = nil
	}
	if s.release != nil {
		s.release()
		s.release = nil
	}
	return err
}

// OpenResult opens a visible succeeded task's payload for reading. A channel
// that can stream (ResultOpener) is read as the caller reads, holding one of
// Config.MaxResultStreams slots; any other is fetched whole through its Get,
// holding one of Config.MaxResultGets slots, since that payload sits in
// memory until the caller is done. When all slots stay taken for
// Config.ResultQueueWait the answer is busy (503, retry later).
func (e *Engine) OpenResult(ctx context.Context, actor Actor, id string) (*ResultStream, error) {
	rs, err := e.openResult(ctx, actor, id, false)
	e.fetched(ctx, actor, rs, err)
	return rs, err
}

// OpenDependencyResult opens, for the worker holding call's live lease, the
// payload of task depID, one of those the lease's task waits (or waited)
// on: the results a fan-in reads. Only the edges of the leased task open a
// task to its worker; any other id is not_found, as a task it may not see.
// Nothing is marked fetched: the inbox items of depID are its creator's.
func (e *Engine) OpenDependencyResult(ctx context.Context, call WorkerCall, depID string) (*ResultStream, error) {
	var dep *host.Task
	err := e.view(ctx, func(r store.Reader) error {
		t, err := liveLease(ctx, r, call, e.now())
		if err != nil {
			return err
		}
		// The one edge (the lease's task, depID): a point read, however
		// many tasks the lease's task waits on.
		d, err := r.GetDependency(ctx, t.Tenant, t.ID, depID)
		if err != nil || d == nil {
			return err
		}
		dep, err = r.GetTask(ctx, t.Tenant, depID)
		return err
	})
	if err == nil && dep == nil {
		err = host.Errorf(host.CodeNotFound, "no task %s among those the task of lease %s waits on", depID, call.LeaseID)
	}
	if err != nil {
		return nil, err
	}
	dep.State = dep.Presented(e.now())
	return e.openTaskResult(ctx, dep, false)
}

// openResult is OpenResult; whole says the caller will hold the payload in
// memory, so even a streamable one takes a slot of MaxResultGets.
func (e *Engine) openResult(ctx context.Context, actor Actor, id string, whole bool) (*ResultStream, error) {
	t, err := e.PeekTask(ctx, actor, id)
	if err != nil {
		return nil, err
	}
	return e.openTaskResult(ctx, t, whole)
}

// openTaskResult opens the payload of t, a task its caller may see.
func (e *Engine) openTaskResult(ctx context.Context, t *host.Task, whole bool) (*ResultStream, error) {
	id := t.ID
	if t.State != host.StateSucceeded || t.Result == nil {
		return nil, host.Errorf(host.CodeConflict, "task %s is %s and has no result%s", id, t.State, resultYet(t.State))
	}
	if t.Result.PurgedAt != nil {
		return nil, archivedResultErr(t)
	}
	out := &ResultStream{Task: t, Channel: t.Result.Channel, Pointer: t.Result.Pointer}
	if t.Result.Pointer == "" {
		return out, nil // located by artifacts or delivery proof only
	}
	if e.cfg.Plugins == nil {
		return nil, host.Errorf(host.CodeConflict, "this gate has no result channels to fetch %s", t.Result.Pointer)
	}
	name := pointerChannel(t.Result)
	if name == "" {
		return nil, host.Errorf(host.CodeConflict, "the result is at %s, a location the worker gave, not a channel of this gate; fetch it from there", t.Result.Pointer)
	}
	ch, err := e.cfg.Plugins.Channel(name)
	if err != nil {
		if host.IsCode(err, host.CodeNotFound) {
			return nil, host.Errorf(host.CodeConflict, "the result is at %s, on channel %q, which this gate does not have; fetch it from there", t.Result.Pointer, name)
		}
		return nil, err
	}
	if algo, want, ok := strings.Cut(t.Result.Checksum, ":"); ok && algo == "sha256" {
		out.hash, out.want = sha256.New(), want
	}
	if op, isOpener := ch.(ResultOpener); isOpener {
		pool := e.streamSlots
		if whole {
			pool = e.getSlots
		}
		release, err := pool.take(ctx, e.cfg.ResultQueueWait, "results")
		if err != nil {
			return nil, err
		}
		rc, size, ok, err := op.OpenResult(ctx, t.ID, t.Result.Pointer)
		if ok {
			if err != nil {
				release()
				return nil, channelReadErr(err, t, name)
			}
			out.r, out.closer, out.release, out.Size = rc, rc, release, size
			return out, nil
		}
		release()
	}
	release := func() {}
	if caps, err := ch.Capabilities(ctx); err != nil || caps.MaxSizeBytes <= 0 || caps.MaxSizeBytes > smallResult {
		// Only channels whose payloads may be large wait for a slot; the
		// inline channel's never are.
		if release, err = e.getSlots.take(ctx, e.cfg.ResultQueueWait, "results through their channel"); err != nil {
			return nil, err
		}
	}
	b, err := ch.Get(ctx, t.Result.Pointer)
	if err != nil {
		release()
		return nil, channelReadErr(err, t, name)
	}
	out.r, out.release, out.Size = bytes.NewReader(b), release, int64(len(b))
	return out, nil
}

// channelReadErr turns a channel's read error of t's payload into the
// engine's answer. A payload the channel no longer has of a result that was
// archived (released, its pointer not purged yet, or archived before the
// gate purged pointers on archive) is answered as archived.
func channelReadErr(err error, t *host.Task, name string) error {
	pointer := t.Result.Pointer
	if host.IsCode(err, host.CodeNotFound) && t.Result.ArchivedAt != nil {
		return archivedResultErr(t)
	}
	if host.IsCode(err, host.CodeBadRequest) {
		return host.Errorf(host.CodeConflict, "the worker recorded %s, which channel %q cannot read: %s", pointer, name, host.ErrorDetail(err))
	}
	if host.ErrorCode(err) == host.CodeInternal {
		return host.WrapError(host.CodeChannelError, err, "result channel "+name+" failed: "+err.Error())
	}
	return err
}

// archivedResultErr is the answer to a read of t's result once it was
// archived and its payload released: not_found, saying when.
func archivedResultErr(t *host.Task) error {
	at := "an earlier time"
	if r := t.Result; r != nil && r.ArchivedAt != nil {
		at = r.ArchivedAt.UTC().Format(time.RFC3339)
	} else if r != nil && r.PurgedAt != nil {
		at = r.PurgedAt.UTC().Format(time.RFC3339)
	}
	return host.Errorf(host.CodeNotFound, "task %s's result was archived at %s and its payload released by its channel; "+
		"it can no longer be read (the summary, metadata and checksum remain on the task)", t.ID, at)
}

// pointerChannel names the channel a result's pointer belongs to: the one
// recorded with it (the gate records the channel of every payload it
// stores), else the pointer's prefix (channel:data). A URL (scheme://…) the
// worker gave names no channel, even when its scheme is a channel's name
// (checkWorkerPointer lets such pointers through as the worker's own): "".
// Nor does any other pointer the worker gave but an inline one
// (host.Result.FromWorker): a channel this gate has now was not this
// gate's at completion (checkWorkerPointer refuses those), so it would read
// or archive the worker's pointer with grants the worker never had.
func pointerChannel(res *host.Result) string {
	name := res.Channel
	if name == "" {
		var rest string
		name, rest, _ = strings.Cut(res.Pointer, ":")
		if strings.HasPrefix(rest, "//") {
			return ""
		}
	}
	if res.FromWorker && name != "inline" {
		return ""
	}
	return name
}

// storePayload stores a completion's inline payload through a result channel:
// the one the worker named, else the task type's default, else by size (inline
// when it fits, file otherwise). It records pointer and sha256 checksum, and
// returns the id of the task it stored the payload for. Nothing is stored
// unless every check it makes passes.
func (e *Engine) storePayload(ctx context.Context, req *CompleteRequest) (string, error) {
	if e.cfg.Plugins == nil {
		return "", host.Errorf(host.CodeBadRequest, "this gate has no result channels; complete with a result_pointer")
	}
	var t *host.Task
	err := e.view(ctx, func(r store.Reader) error {
		var err error
		t, err = liveLease(ctx, r, req.WorkerCall, e.now())
		return err
	})
	if err != nil {
		return "", err
	}
	ct, err := e.types.get(ctx, t.Tenant, t.Type)
	if err != nil {
		return "", err
	}
	if ct.tt.MaxPayloadBytes > 0 && int64(len(req.Payload)) > ct.tt.MaxPayloadBytes {
		return "", host.Errorf(host.CodeTooLarge, "result payload is %d bytes, task type %s allows %d", len(req.Payload), t.Type, ct.tt.MaxPayloadBytes)
	}
	name := req.Result.Channel
	if name == "" {
		name = ct.tt.DefaultResultChannel
	}
	ch, err := e.cfg.Plugins.Channel(name)
	if err != nil {
		switch {
		case name != "" && name == ct.tt.DefaultResultChannel && (host.IsCode(err, host.CodeNotFound) || host.IsCode(err, host.CodeBadRequest)):
			// The type's own channel is gone (its plugin left the folder
			// or was refused): the gate's fault, not the worker's.
			// Nothing is stored and the lease stays; the worker retries.
			return "", host.WrapError(host.CodePluginUnavailable, err, fmt.Sprintf(
				"task type %q stores results in channel %q, which is not loaded now (%s); an operator must restore the plugin or change the task type; retry the completion",
				t.Type, name, host.ErrorDetail(err)))
		case host.IsCode(err, host.CodeNotFound):
			return "", host.Errorf(host.CodeBadRequest, "no result channel named %q", name)
		}
		return "", err
	}
	if caps, err := ch.Capabilities(ctx); err == nil && caps.MaxSizeBytes > 0 && int64(len(req.Payload)) > caps.MaxSizeBytes && req.Result.Channel == "" {
		// Auto-route by size: the default channel cannot hold it; use the file channel.
		if alt, err2 := e.cfg.Plugins.Channel("file"); err2 == nil {
			ch, name = alt, "file"
		}
	}
	var ptr string
	var proof json.RawMessage
	if pp, ok := ch.(ProofChannel); ok {
		ptr, proof, err = pp.PutWithProof(ctx, t.ID, req.Payload)
	} else {
		ptr, err = ch.Put(ctx, t.ID, req.Payload)
	}
	if err != nil {
		if host.ErrorCode(err) == host.CodeInternal {
			return "", host.WrapError(host.CodeChannelError, err, "result channel "+name+" failed to store the payload: "+err.Error())
		}
		return "", err
	}
	sum := sha256.Sum256(req.Payload)
	req.Result.Channel, req.Result.Pointer = name, ptr
	req.Result.Checksum = "sha256:" + hex.EncodeToString(sum[:])
	if len(proof) > 0 && string(proof) != "null" && len(req.Result.DeliveryProof) == 0 {
		req.Result.DeliveryProof = proof
	}
	return t.ID, nil
}

// releaseUnrecorded releases, through its channel, a payload this
// completion stored for task taskID that no committed row records: the
// completion was refused after storing it (cause, its lease lost to an
// expiry or a concurrent change), or a concurrent repeat of it recorded its
// own payload first (cause nil). Best effort: a failure is logged, and
// nothing is released that a row may point to:
//
//   - cause is not a refusal decided before the commit (a store failure, a
//     canceled call): the write may have committed with this very pointer,
//     so the payload stays (a retry of the completion stores it again to
//     the same place, or hears the first outcome);
//   - the task now records a result in the same channel: a channel's ack may
//     release more than one object (the file channel removes the task's
//     folder), so the result's archive releases it with the rest;
//   - the task may still be attempted (queued, scheduled, waiting, leased
//     under this lease or another, dead-lettered and so redrivable): its
//     next holder may store into the same place (the file channel's ack
//     removes the task's folder; an http channel's address is the task's),
//     and between this read and the ack nothing holds it back;
//   - the task cannot be read.
//
// A payload kept this way stays until the task's result is archived in
// that channel, and for a task that never succeeds there, for good (a
// channel has no call that releases one object alone).
func (e *Engine) releaseUnrecorded(ctx context.Context, call WorkerCall, taskID string, res host.Result, cause error) {
	if res.Pointer == "" || e.cfg.Plugins == nil {
		return
	}
	name := pointerChannel(&res)
	if name == "" || name == "inline" {
		return // nothing stored outside the pointer itself
	}
	log := e.log.With("task_id", taskID, "lease_id", call.LeaseID, "channel", name, "result_pointer", res.Pointer)
	if cause != nil {
		if s := host.HTTPStatus(host.ErrorCode(cause)); s < 400 || s >= 500 {
			log.Warn("complete: a payload stored for a completion whose write may have committed is kept", "err", cause)
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var t *host.Task
	if err := e.view(ctx, func(r store.Reader) error {
		var err error
		t, err = r.GetTask(ctx, call.Tenant, taskID)
		return err
	}); err != nil {
		log.Warn("complete: a payload stored for a refused completion is kept: its task could not be read", "err", err)
		return
	}
	if t.Result != nil && pointerChannel(t.Result) == name {
		return // released with the recorded result when it is archived
	}
	switch t.State {
	case host.StateSucceeded, host.StateCanceled, host.StateArchived:
		// Finished for good: no attempt will store into this place again.
	default:
		return // a later attempt's holder may store into the same place
	}
	ch, err := e.cfg.Plugins.Channel(name)
	if err == nil {
		err = ch.Ack(ctx, res.Pointer)
	}
	if err != nil {
		log.Warn("complete: the channel did not release a payload stored for a refused completion", "err", err)
		return
	}
	log.Info("complete: released a payload stored for a completion that was not recorded", "cause", cause)
}

// ProofChannel is a channel whose Put can also prove delivery (push channels):
// the proof is recorded in the completion receipt.
type ProofChannel interface {
	PutWithProof(ctx context.Context, taskID string, payload []byte) (string, json.RawMessage, error)
}

// resultYet is " yet" for a task that may still succeed, and "" for one
// that has finished otherwise (canceled, dead-lettered), whose result will
// never come.
func resultYet(s host.TaskState) string {
	switch s {
	case host.StateCanceled, host.StateDeadLetter:
		return ""
	}
	return " yet"
}
