package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/sdk/client"
)

// ResizeParams are the params of the image.resize task type.
type ResizeParams struct {
	URL   string `json:"url"`
	Width int    `json:"width"`
}

// Thumb is what an image.resize worker returns.
type Thumb struct {
	URL string `json:"url"`
}

// A producer queues a task with typed params, waits for it with a bound,
// and decodes its result.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := client.New("http://127.0.0.1:8080", os.Getenv("ASYNCGATE_KEY"))
	resize := client.NewTaskType[ResizeParams](c, "image.resize")
	ack, err := resize.Enqueue(ctx, ResizeParams{URL: "https://example.com/cat.png", Width: 640},
		&client.EnqueueOptions{IdempotencyKey: "cat-640"})
	if err != nil {
		var ae *client.APIError
		if errors.As(err, &ae) && ae.Code == "invalid_params" {
			fmt.Println("refused:", ae.Detail)
		}
		return
	}
	t, err := c.Wait(ctx, ack.TaskID, &client.WaitOptions{OnPoll: func(t *client.Task) {
		if t.ProgressPercent != nil {
			fmt.Printf("%.0f%% %s\n", *t.ProgressPercent, t.ProgressMessage)
		}
	}})
	if err != nil || t.Status != client.StateSucceeded {
		return
	}
	thumb, _, err := client.ResultAs[Thumb](ctx, c, t.TaskID)
	if err == nil {
		fmt.Println(thumb.URL)
	}
}

// A later session finds the outcomes of the work an earlier one queued: the
// unread inbox items (a task's end, or a workflow's: its id is the
// workflow's), their results, and marks them read once handled; what is
// still owed is in OwedToYou.
func ExampleClient_SessionBootstrap() {
	ctx := context.Background()
	c := client.New("http://127.0.0.1:8080", os.Getenv("ASYNCGATE_KEY"))
	boot, err := c.SessionBootstrap(ctx, 0)
	if err != nil {
		return
	}
	fmt.Printf("%d outcomes still owed\n", len(boot.OwedToYou))
	items, cursor := boot.Inbox, boot.InboxCursor
	for {
		var done []string
		for _, it := range items {
			switch it.Kind {
			case client.InboxCompleted:
				if strings.HasPrefix(it.TaskID, "WF-") {
					if w, err := c.GetWorkflow(ctx, it.TaskID); err == nil && w.Result != nil {
						fmt.Println(w.Name, "succeeded:", w.Result.Summary)
					}
				} else if r, err := c.Result(ctx, it.TaskID); err == nil {
					fmt.Println(it.TaskID, "succeeded:", r.Summary)
				}
			case client.InboxFailed, client.InboxEscalation:
				fmt.Println(it.TaskID, it.Kind+":", it.Summary)
			}
			done = append(done, it.InboxID)
		}
		if len(done) > 0 {
			if _, err := c.MarkRead(ctx, done...); err != nil {
				return
			}
		}
		if cursor == "" {
			return
		}
		if items, cursor, err = c.Inbox(ctx, client.InboxOptions{Unread: true, Cursor: cursor}); err != nil {
			return
		}
	}
}
