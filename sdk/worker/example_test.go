package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/asyncgate/asyncgate/sdk/worker"
)

// A complete worker: one handler per task type, progress, typed errors, and
// a graceful shutdown on SIGINT or SIGTERM. (No output: it needs a gate.)
func Example() {
	client := worker.NewClient("http://127.0.0.1:8080", os.Getenv("ASYNCGATE_KEY"))
	runner := worker.NewRunner(client, worker.Config{
		WorkerID:    "worker.indexer-1", // must match the worker key's principal
		Concurrency: 4,
		Logger:      slog.Default(),
	})

	runner.Handle("doc.index", func(ctx context.Context, t *worker.Task) (any, error) {
		var p struct {
			Paths []string `json:"paths"`
		}
		if err := t.Bind(&p); err != nil {
			return nil, worker.Fatal(err) // bad params: retrying will not help
		}
		for i, path := range p.Paths {
			if err := ctx.Err(); err != nil {
				return nil, err // lease lost, task canceled or shutting down: stop now
			}
			worker.Logger(ctx).Info("indexing", "path", path)
			worker.Progress(ctx, float64(100*(i+1)/len(p.Paths)), "indexed "+path)
		}
		return map[string]int{"indexed": len(p.Paths)}, nil // inline JSON result
	})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runner.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// A handler that stores its result itself and reports where it is.
func ExamplePointer() {
	handler := func(ctx context.Context, t *worker.Task) (any, error) {
		key := "results/" + t.ID + ".json"
		// … upload the result to s3://my-bucket/<key> …
		return worker.Pointer{
			Channel:  "s3",
			Pointer:  "s3://my-bucket/" + key,
			Checksum: "sha256:…",
			Summary:  "report written",
			Metadata: map[string]any{"bytes": 51234},
		}, nil
	}
	_ = handler
}

// Plain errors are retryable; Fatal dead-letters the task at once.
func ExampleFatal() {
	transient := errors.New("upstream timeout")
	bad := worker.Fatal(errors.New("params.url is missing"))
	fmt.Println(worker.IsRetryable(transient))
	fmt.Println(worker.IsRetryable(worker.Retryable(transient)))
	fmt.Println(worker.IsRetryable(bad), bad)
	fmt.Println(worker.IsRetryable(fmt.Errorf("fetching: %w", bad)))
	// Output:
	// true
	// true
	// false fatal: params.url is missing
	// false
}

// A handler learns why its context was cancelled from context.Cause.
func ExampleErrLeaseLost() {
	handler := func(ctx context.Context, t *worker.Task) (any, error) {
		select {
		case <-time.After(time.Hour):
			return "done", nil
		case <-ctx.Done():
			switch cause := context.Cause(ctx); {
			case errors.Is(cause, worker.ErrLeaseLost):
				// Another worker may have the task now: stop, report nothing.
			case errors.Is(cause, worker.ErrTaskCanceled):
				// The agent canceled the task: clean up.
			case errors.Is(cause, worker.ErrShutdown):
				// The worker is stopping: the task goes back to the queue.
			}
			return nil, ctx.Err()
		}
	}
	_ = handler
}

// The Lease Protocol's error backoff: 5 s, 10 s, 20 s, 40 s, then 60 s, each
// with up to ±10% jitter.
func ExampleBackoff() {
	var b worker.Backoff // the zero value is the Lease Protocol's
	fast := worker.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second}
	for n := 1; n <= 6; n++ {
		fmt.Println(b.Delay(n), fast.Delay(n))
	}
}

// Driving the protocol by hand with the Client.
func ExampleClient() {
	ctx := context.Background()
	c := worker.NewClient("http://127.0.0.1:8080", os.Getenv("ASYNCGATE_KEY"))
	offers, err := c.Lease(ctx, worker.LeaseRequest{TaskTypes: []string{"echo"}, MaxTasks: 1, WaitSeconds: 30})
	if err != nil || len(offers) == 0 {
		return
	}
	o := offers[0]
	if err := c.Accept(ctx, o.LeaseID, o.Task.ID); err != nil {
		return
	}
	_, _ = c.Complete(ctx, o.LeaseID, worker.Completion{Result: o.Task.Params})
}
