package main

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// printTaskStory prints a task's attempts (the live one with its lease's
// time left and when its worker was last heard from) and its timeline:
// receipts, lease grants and expiries and progress reports, oldest first.
func printTaskStory(rc *remoteCtx, id string) error {
	var at struct {
		Attempts   []host.Attempt `json:"attempts"`
		ServerTime time.Time      `json:"server_time"`
	}
	if err := rc.call("GET", "/v1/tasks/"+url.PathEscape(id)+"/attempts", nil, &at); err != nil {
		return err
	}
	if n := len(at.Attempts); n > 0 {
		if a := at.Attempts[n-1]; a.Outcome == host.AttemptRunning {
			kv := [][2]string{{"current attempt", fmt.Sprintf("%d (lease %d of the task) by %s", a.Attempt, a.Lease, a.WorkerID)}}
			acc := "no (an offer: the worker has not accepted it)"
			if a.AcceptedAt != nil {
				acc = "at " + a.AcceptedAt.UTC().Format(time.RFC3339)
			}
			kv = append(kv, [2]string{"accepted", acc})
			if a.LeaseExpiresAt != nil {
				kv = append(kv, [2]string{"lease left", short(a.LeaseExpiresAt.Sub(at.ServerTime)) + " (expires " + a.LeaseExpiresAt.UTC().Format(time.RFC3339) + ")"})
			}
			if a.LastHeardAt != nil {
				kv = append(kv, [2]string{"last heard", short(at.ServerTime.Sub(*a.LastHeardAt)) + " ago (grant, accept or heartbeat)"})
			}
			fmt.Fprintln(rc.out)
			rc.fields(kv)
		}
		fmt.Fprintln(rc.out, "\nattempts (oldest first):")
		rows := make([][]string, 0, n)
		for _, a := range at.Attempts {
			acc := "no"
			if a.AcceptedAt != nil {
				acc = "+" + host.HeldText(a.AcceptedAt.Sub(a.LeasedAt).Milliseconds())
			}
			rows = append(rows, []string{"  " + strconv.Itoa(a.Attempt), strconv.Itoa(a.Lease), a.WorkerID,
				a.LeasedAt.UTC().Format(time.RFC3339), acc, host.HeldText(a.DurationMS), string(a.Outcome), clip(attemptNote(a), 90)})
		}
		rc.table([]string{"  ATTEMPT", "LEASE", "WORKER", "LEASED", "ACCEPTED", "HELD", "OUTCOME", "ERROR / NOTE"}, rows)
	}
	var tl struct {
		Events    []host.TimelineEvent `json:"events"`
		Truncated bool                 `json:"truncated"`
	}
	if err := rc.call("GET", "/v1/tasks/"+url.PathEscape(id)+"/timeline", nil, &tl); err != nil {
		return err
	}
	if len(tl.Events) > 0 {
		fmt.Fprintln(rc.out, "\ntimeline (oldest first):")
		rows := make([][]string, 0, len(tl.Events))
		for _, ev := range tl.Events {
			att := ""
			if ev.Lease > 0 {
				att = strconv.Itoa(ev.Attempt) + "/" + strconv.Itoa(ev.Lease)
			}
			who := ev.WorkerID
			if ev.From != "" {
				who = ev.From + " → " + ev.To
			}
			rows = append(rows, []string{"  " + strconv.Itoa(ev.EventID), ev.Time.UTC().Format("2006-01-02T15:04:05.000Z"), ev.Type, att, who, clip(ev.Note(), 80), ev.ReceiptID})
		}
		rc.table([]string{"  #", "AT", "EVENT", "ATTEMPT/LEASE", "WHO", "DETAIL", "RECEIPT"}, rows)
		if tl.Truncated {
			fmt.Fprintf(rc.out, "  more: the task has more receipts or progress reports than one timeline holds (gate receipts verify %s reads them all)\n", id)
		}
	}
	return nil
}

// attemptNote is an attempt's note, and a running one's lease expiry.
func attemptNote(a host.Attempt) string {
	n := a.Note()
	if a.Outcome == host.AttemptRunning && a.LeaseExpiresAt != nil {
		n = strings.TrimPrefix(n+" · lease until "+a.LeaseExpiresAt.UTC().Format(time.RFC3339), " · ")
	}
	return n
}
