package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
)

// TestTimingCacheBounded: the cache of compiled cron expressions is filled
// by whatever a caller sends (before the rest of the request is checked), so
// a hostile caller sending ever new valid expressions must not grow it
// without bound.
func TestTimingCacheBounded(t *testing.T) {
	n := 0
	for d := 1; d <= 28 && n < 3*maxCachedTimings; d++ {
		for h := 0; h < 24 && n < 3*maxCachedTimings; h++ {
			for m := 0; m < 60 && n < 3*maxCachedTimings; m++ {
				if _, err := compileTiming(fmt.Sprintf("%d %d %d * *", m, h, d), "", 0, time.Time{}); err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
	}
	cached := 0
	timings.Range(func(any, any) bool { cached++; return true })
	if cached > maxCachedTimings {
		t.Fatalf("%d distinct expressions left %d compiled ones cached, the bound is %d", n, cached, maxCachedTimings)
	}
}

// TestCronFallBackFiresOnce: a local time the clocks pass twice when they
// go back (docs/http.md, schedules: "one that happens twice fires once")
// fires at its first instant only, whatever the shift (an hour, or Lord
// Howe's half hour); every other run is kept.
func TestCronFallBackFiresOnce(t *testing.T) {
	cases := []struct {
		cron, zone, after string
		want              []string // the next runs after after, in UTC
	}{
		// 2027-11-07 01:30 in New York is 05:30Z (EDT) and 06:30Z (EST).
		{"30 1 7 11 *", "America/New_York", "2027-11-01T00:00:00Z",
			[]string{"2027-11-07T05:30:00Z", "2028-11-07T06:30:00Z"}},
		// Hourly across that night: 01:00 EST (06:00Z) repeats 01:00 EDT.
		{"0 * * * *", "America/New_York", "2027-11-07T03:30:00Z",
			[]string{"2027-11-07T04:00:00Z", "2027-11-07T05:00:00Z", "2027-11-07T07:00:00Z", "2027-11-07T08:00:00Z"}},
		// Every quarter hour: 01:00–01:45 EST are all second passes.
		{"*/15 1 * * *", "America/New_York", "2027-11-07T04:50:00Z",
			[]string{"2027-11-07T05:00:00Z", "2027-11-07T05:15:00Z", "2027-11-07T05:30:00Z", "2027-11-07T05:45:00Z", "2027-11-08T06:00:00Z"}},
		// Every minute of 01:xx: the hour's second pass (60 instants) is
		// skipped whole.
		{"* 1 * * *", "America/New_York", "2027-11-07T05:58:00Z",
			[]string{"2027-11-07T05:59:00Z", "2027-11-08T06:00:00Z"}},
		// Berlin goes back at 03:00 CEST on 2027-10-31: 02:30 is 00:30Z, then 01:30Z.
		{"30 2 * * *", "Europe/Berlin", "2027-10-30T12:00:00Z",
			[]string{"2027-10-31T00:30:00Z", "2027-11-01T01:30:00Z"}},
		// Lord Howe goes back half an hour at 02:00 on 2027-04-04: 01:45
		// (+11, 14:45Z the day before) comes again at +10:30 (15:15Z).
		{"45 1 * * *", "Australia/Lord_Howe", "2027-04-03T12:00:00Z",
			[]string{"2027-04-03T14:45:00Z", "2027-04-04T15:15:00Z"}},
		// A time the spring change skips stays skipped; one outside the
		// changes is untouched.
		{"30 2 14 3 *", "America/New_York", "2027-01-01T00:00:00Z",
			[]string{"2028-03-14T06:30:00Z"}},
		{"30 1 * * *", "UTC", "2027-11-06T00:00:00Z",
			[]string{"2027-11-06T01:30:00Z", "2027-11-07T01:30:00Z"}},
	}
	for _, c := range cases {
		tm, err := compileTiming(c.cron, c.zone, 0, time.Time{})
		if err != nil {
			t.Fatalf("%s in %s: %v", c.cron, c.zone, err)
		}
		at, err := time.Parse(time.RFC3339, c.after)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for range c.want {
			at = tm.next(at)
			got = append(got, at.Format(time.RFC3339))
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%q in %s after %s: next runs %v, want %v", c.cron, c.zone, c.after, got, c.want)
		}
	}
}

// TestLimitsCountCharacters: the documented limits on names, keys and
// reasons count characters, not bytes: 200 accented letters (400 bytes)
// make a schedule name and a workflow name, 201 do not.
func TestLimitsCountCharacters(t *testing.T) {
	at := strings.Repeat("é", 200)
	if _, err := checkScheduleName(at); err != nil {
		t.Errorf("a schedule name of 200 characters (%d bytes): %v", len(at), err)
	}
	if _, err := checkScheduleName(at + "é"); !host.IsCode(err, host.CodeBadRequest) || !strings.Contains(err.Error(), "at most 200") {
		t.Errorf("a schedule name of 201 characters: %v, want bad_request naming the limit", err)
	}
	e := &Engine{}
	req := &WorkflowRequest{Name: at}
	if _, _, err := e.planWorkflow(context.Background(), Actor{}, req); host.IsCode(err, host.CodeInvalidWorkflow) && strings.Contains(err.Error(), "name") {
		t.Errorf("a workflow name of 200 characters: %v", err)
	}
	req = &WorkflowRequest{Name: at + "é"}
	if _, _, err := e.planWorkflow(context.Background(), Actor{}, req); !host.IsCode(err, host.CodeInvalidWorkflow) || !strings.Contains(err.Error(), "name must be at most 200") {
		t.Errorf("a workflow name of 201 characters: %v, want invalid_workflow naming the limit", err)
	}
	for _, c := range []struct {
		s    string
		n    int
		over bool
	}{{"", 0, false}, {"abc", 3, false}, {"abcd", 3, true}, {"ééé", 3, false}, {"éééé", 3, true}, {"日本語", 2, true}, {"🙂🙂", 2, false}} {
		if got := host.LongerThan(c.s, c.n); got != c.over {
			t.Errorf("LongerThan(%q, %d) = %v, want %v", c.s, c.n, got, c.over)
		}
	}
}

// TestCronEmptyListElementRefused: crontab refuses an empty element of a
// list; the parser would drop it and fire at what is left ("0,,5" at :00
// and :05), so the gate refuses it first.
func TestCronEmptyListElementRefused(t *testing.T) {
	for _, c := range []string{"0,,5 * * * *", ",5 * * * *", "5, * * * *", "0 1,,2 * * *", "0 0 * * 1,,3"} {
		if _, err := compileTiming(c, "", 0, time.Time{}); !host.IsCode(err, host.CodeInvalidCron) {
			t.Errorf("cron %q: %v, want invalid_cron", c, err)
		}
	}
	for _, c := range []string{"0,5 * * * *", "@daily", "*/15 1-3 * JAN,JUL MON-FRI"} {
		if _, err := compileTiming(c, "", 0, time.Time{}); err != nil {
			t.Errorf("cron %q: %v", c, err)
		}
	}
}

// TestNamesRefuseBidiOverrides: a schedule or workflow name may not hold
// the bidirectional controls that show text in another order than it is
// written; right-to-left script itself is fine.
func TestNamesRefuseBidiOverrides(t *testing.T) {
	for _, n := range []string{"\u202egnp.exe", "a\u2066b\u2069", "x\u202ay"} {
		if _, err := checkScheduleName(n); !host.IsCode(err, host.CodeBadRequest) {
			t.Errorf("schedule name %q: %v, want bad_request", n, err)
		}
		req := &WorkflowRequest{Name: n}
		if _, _, err := (&Engine{}).planWorkflow(context.Background(), Actor{}, req); !host.IsCode(err, host.CodeInvalidWorkflow) || !strings.Contains(err.Error(), "name must be") {
			t.Errorf("workflow name %q: %v, want invalid_workflow on its name", n, err)
		}
	}
	for _, n := range []string{"שלום עולם", "تقرير يومي", "nightly index"} {
		if _, err := checkScheduleName(n); err != nil {
			t.Errorf("schedule name %q: %v", n, err)
		}
	}
}

// TestCronDayFieldsAsCrontab: the day of month and the day of week combine
// as crontab(5) has them. A field starting with "*" (a step over the whole
// range included) leaves the other deciding with it (both must match):
// "0 0 */2 * 1" fires on odd-dated Mondays only, not on every odd day and
// every Monday. Both restricted, either matches.
func TestCronDayFieldsAsCrontab(t *testing.T) {
	from := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		expr string
		want []string
	}{
		{"0 0 */2 * 1", []string{"2026-12-07", "2026-12-21", "2027-01-11", "2027-01-25", "2027-02-01"}},
		{"0 0 1 * */3", []string{"2027-05-01", "2027-08-01", "2027-09-01", "2027-12-01", "2028-01-01"}},
		{"0 0 13 * 5", []string{"2026-12-04", "2026-12-11", "2026-12-13", "2026-12-18", "2026-12-25"}},
		{"0 0 */10 * *", []string{"2026-12-11", "2026-12-21", "2026-12-31", "2027-01-01", "2027-01-11"}},
		{"0 0 ? * 1-5/2", []string{"2026-12-02", "2026-12-04", "2026-12-07", "2026-12-09", "2026-12-11"}},
	} {
		tm, err := compileTiming(c.expr, "", 0, time.Time{})
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		var got []string
		for n := from; len(got) < len(c.want); {
			n = tm.next(n)
			got = append(got, n.Format("2006-01-02"))
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%q fires on %v, want %v", c.expr, got, c.want)
		}
	}
}

// TestIntervalZeroSaysWhatItTakes: interval_seconds 0 reads as absent, so
// a schedule with neither timing is refused with a detail that gives the
// range (a caller who sent 0 learns what it takes), and one with both says
// so.
func TestIntervalZeroSaysWhatItTakes(t *testing.T) {
	_, err := compileTiming("", "", 0, time.Time{})
	if !host.IsCode(err, host.CodeInvalidInterval) || !strings.Contains(err.Error(), "1..31622400") {
		t.Fatalf("neither cron nor interval: %v, want invalid_interval naming 1..31622400", err)
	}
	_, err = compileTiming("* * * * *", "", 60, time.Time{})
	if !host.IsCode(err, host.CodeInvalidInterval) || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("both cron and interval: %v, want invalid_interval saying not both", err)
	}
}
