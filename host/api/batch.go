package api

import (
	"runtime/debug"
	"sync"
)

// MaxBatchOutcomes caps the entries of one batch of lease outcomes
// (complete, fail, heartbeat), and MaxBatchEnqueue the tasks of one batch
// enqueue. A call over the cap is refused whole; under it every entry gets an
// answer of its own.
const (
	MaxBatchOutcomes = 100
	MaxBatchEnqueue  = 1000
)

// BatchParallel is how many entries of one batch run at once. Their writes
// meet in the store's write queue, so they commit in a few group-commit
// batches instead of one transaction each.
const BatchParallel = 64

// BatchEntryError is why one entry of a batch was refused: the machine code
// and the words its single call would have answered with.
type BatchEntryError struct {
	Error  string `json:"error,omitempty"`
	Detail string `json:"detail,omitempty"`
	// TaskStatus is the state of the task of a lease_expired entry's lease,
	// told only to the worker that held it (host.Error.TaskStatus).
	TaskStatus string `json:"task_status,omitempty"`
}

// OutcomeResult is one entry's answer in a batch of lease outcomes. OK
// entries carry the answer of their verb (complete, fail or heartbeat);
// refused ones carry error and detail. HTTPStatus is the status the single
// call would have answered with.
type OutcomeResult struct {
	ID         string             `json:"id,omitempty"`
	LeaseID    string             `json:"lease_id"`
	OK         bool               `json:"ok"`
	HTTPStatus int                `json:"http_status"`
	Complete   *CompleteResponse  `json:"complete,omitempty"`
	Fail       *FailResponse      `json:"fail,omitempty"`
	Heartbeat  *HeartbeatResponse `json:"heartbeat,omitempty"`
	BatchEntryError
}

// OutcomesResponse is the 200 answer of a batch of lease outcomes: one
// result per entry, in the entries' order.
type OutcomesResponse struct {
	Results   []OutcomeResult `json:"results"`
	Succeeded int             `json:"succeeded"`
	Failed    int             `json:"failed"`
}

// RunBatch calls fn(i) for i in [0, n), up to parallel at once. Entries
// with the same non-empty key (a lease id, an idempotency key) run one after
// another in their order; others run concurrently. It returns when every
// call has returned. A panic in fn(i) is recovered and handed to
// panicked(i, value, stack), which answers that entry; the other entries,
// and the rest of its key's group, still run. The batch's goroutines run
// outside any handler's recoverer, so an unrecovered panic would end the
// process.
func RunBatch(n, parallel int, key func(int) string, fn func(int), panicked func(i int, v any, stack []byte)) {
	var groups [][]int
	at := map[string]int{}
	for i := 0; i < n; i++ {
		k := key(i)
		if k == "" {
			groups = append(groups, []int{i})
			continue
		}
		if g, ok := at[k]; ok {
			groups[g] = append(groups[g], i)
			continue
		}
		at[k] = len(groups)
		groups = append(groups, []int{i})
	}
	if parallel < 1 {
		parallel = 1
	}
	parallel = min(parallel, len(groups))
	next := make(chan []int)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range next {
				for _, i := range g {
					runEntry(i, fn, panicked)
				}
			}
		}()
	}
	for _, g := range groups {
		next <- g
	}
	close(next)
	wg.Wait()
}

// runEntry calls fn(i), turning a panic into a call of panicked.
func runEntry(i int, fn func(int), panicked func(int, any, []byte)) {
	defer func() {
		if v := recover(); v != nil {
			panicked(i, v, debug.Stack())
		}
	}()
	fn(i)
}
