package plugin

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"
)

// instance is one live module instance. It is used by one call at a time.
type instance struct {
	mod      api.Module
	alloc    api.Function
	ops      map[string]api.Function
	stack    [4]uint64
	stderr   *headBuffer
	lastUsed time.Time
	pending  []byte // http_request's response, waiting for http_response
	plugin   *Plugin
	pool     *pool        // the pool it belongs to
	mem      *guestMemory // its linear memory's mapping, released by close
}

type instanceKey struct{}

// newInstance cold-starts an instance: instantiate, run _initialize, check the
// ABI version.
func (pl *pool) newInstance(ctx context.Context) (*instance, error) {
	p := pl.p
	p.stats.coldStart()
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, p.limits.StartTimeout)
	defer cancel()
	// A start that ran out of its own deadline (not one whose caller gave
	// up) may pass on a quieter machine: the registry retries it.
	startTimedOut := func(err error) error {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
			return transientError{err}
		}
		return err
	}
	stderr := &headBuffer{max: 1024}
	mem := &guestMemory{}
	mod, err := pl.wrt.InstantiateModule(experimental.WithMemoryAllocator(ctx, mem.allocator()), pl.compiled, p.modCfg.WithStderr(stderr))
	if err != nil {
		mem.release()
		msg := err.Error()
		if t := stderr.String(); t != "" {
			msg += " (guest stderr: " + truncate(t, 300) + ")"
		}
		return nil, startTimedOut(fmt.Errorf("plugin %s: start instance: %s", p.Manifest.Name, msg))
	}
	if mod.IsClosed() {
		// Its start function exited (proc_exit, even with 0), or its
		// deadline closed it as it returned: wazero hands back a closed
		// module, on which nothing may run.
		mod.Close(context.Background())
		mem.release()
		if ctx.Err() != nil {
			return nil, startTimedOut(fmt.Errorf("plugin %s: start instance: %w", p.Manifest.Name, ctx.Err()))
		}
		return nil, fmt.Errorf("plugin %s: start instance: its start function exited; a plugin's _initialize must return", p.Manifest.Name)
	}
	inst := &instance{mod: mod, stderr: stderr, ops: map[string]api.Function{}, plugin: p, pool: pl, mem: mem}
	// A dropped instance (never closed) gives its mapping back too.
	runtime.AddCleanup(inst, func(m *guestMemory) { m.release() }, mem)
	inst.alloc = mod.ExportedFunction("asyncgate_alloc")
	for _, op := range kindOps[p.Manifest.Kind] {
		inst.ops[op] = mod.ExportedFunction(op)
	}
	v, err := mod.ExportedFunction("asyncgate_abi_version").Call(ctx)
	if err != nil || len(v) != 1 || uint32(v[0]) != ABIVersion {
		inst.close()
		got := "error"
		if err == nil && len(v) == 1 {
			got = fmt.Sprint(int32(v[0]))
		}
		return nil, startTimedOut(fmt.Errorf("plugin %s: module speaks ABI %s, host speaks %d", p.Manifest.Name, got, ABIVersion))
	}
	return inst, nil
}

// errTransient is what a transientError is: a load refused for a cause
// that may pass (its start ran out of time), not for the module itself.
var errTransient = errors.New("transient load failure")

// transientError marks a load error as transient (errors.Is(err,
// errTransient)); its text is the error's own.
type transientError struct{ error }

func (e transientError) Unwrap() error        { return e.error }
func (e transientError) Is(target error) bool { return target == errTransient }

// close closes the instance and unmaps its memory. Only when no call runs
// on it.
func (inst *instance) close() {
	inst.mod.Close(context.Background())
	inst.mem.release()
}

// write copies b into a buffer the guest allocated and returns its address.
func (inst *instance) write(ctx context.Context, b []byte) (uint32, *Fault) {
	if len(b) == 0 {
		return 0, nil
	}
	inst.stack[0] = uint64(len(b))
	if err := inst.alloc.CallWithStack(ctx, inst.stack[:]); err != nil {
		return 0, trapFault(ctx, err)
	}
	ptr := uint32(inst.stack[0])
	if ptr == 0 || !inst.mod.Memory().Write(ptr, b) {
		return 0, &Fault{Kind: FaultBadOutput, Message: fmt.Sprintf("asyncgate_alloc(%d) returned an invalid address", len(b))}
	}
	return ptr, nil
}

// call runs op and returns a copy of the result frame.
func (inst *instance) call(ctx context.Context, op string, input, data []byte) ([]byte, *Fault) {
	fn := inst.ops[op]
	if fn == nil {
		return nil, &Fault{Kind: FaultUnavailable, Message: "no export " + op}
	}
	ctx = context.WithValue(ctx, instanceKey{}, inst)
	p, f := inst.write(ctx, input)
	if f != nil {
		return nil, f
	}
	dp, f := inst.write(ctx, data)
	if f != nil {
		return nil, f
	}
	inst.stack = [4]uint64{uint64(p), uint64(len(input)), uint64(dp), uint64(len(data))}
	if err := fn.CallWithStack(ctx, inst.stack[:]); err != nil {
		return nil, trapFault(ctx, err)
	}
	packed := inst.stack[0]
	ptr, n := uint32(packed>>32), uint32(packed)
	if n > inst.plugin.limits.MaxResult {
		return nil, &Fault{Kind: FaultBadOutput, Message: fmt.Sprintf("result of %d bytes exceeds the limit", n)}
	}
	b, ok := inst.mod.Memory().Read(ptr, n)
	if !ok {
		return nil, &Fault{Kind: FaultBadOutput, Message: "result points outside guest memory"}
	}
	return append([]byte(nil), b...), nil
}

// trapFault classifies an error from a guest call.
func trapFault(ctx context.Context, err error) *Fault {
	var ee *sys.ExitError
	if errors.As(err, &ee) {
		switch ee.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return &Fault{Kind: FaultTimeout, Message: "deadline exceeded; the call was stopped", Err: err}
		case sys.ExitCodeContextCanceled:
			return &Fault{Kind: FaultCanceled, Message: "context canceled; the call was stopped", Err: err}
		}
		return &Fault{Kind: FaultTrap, Message: fmt.Sprintf("guest exited with code %d", ee.ExitCode()), Err: err}
	}
	if ctx.Err() != nil {
		return &Fault{Kind: FaultTimeout, Message: ctx.Err().Error(), Err: err}
	}
	msg, trace := splitTrace(err.Error())
	return &Fault{Kind: FaultTrap, Message: msg, Trace: trace, Err: err}
}

// headBuffer keeps the first max bytes written to it: a guest's stderr,
// where the Go runtime writes "fatal error: ..." before it traps.
type headBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	h.mu.Unlock()
	return len(p), nil
}

// String returns the first two non-empty lines written.
func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var lines []string
	for _, l := range strings.Split(string(h.b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
			if len(lines) == 2 {
				break
			}
		}
	}
	return strings.Join(lines, " / ")
}
