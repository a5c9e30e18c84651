package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
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
