package ai

import (
	"net/http"
	"testing"
	"time"
)

// answer is an answer with the headers given as name, value pairs.
func answer(kv ...string) *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return &http.Response{Header: h}
}

// TestRetryAfterForms: delay-seconds (with a fraction too) and HTTP-dates
// in RFC 9110's three forms, measured against the answer's Date; a readable
// Retry-After-Ms before either; never negative, at most retryAfterBound;
// anything else is 0.
func TestRetryAfterForms(t *testing.T) {
	date := time.Date(2001, time.February, 3, 4, 5, 6, 0, time.UTC)
	dated := func(ra string) *http.Response { return answer("Date", date.Format(http.TimeFormat), "Retry-After", ra) }
	for _, tc := range []struct {
		name string
		res  *http.Response
		want time.Duration
	}{
		{"no answer", nil, 0},
		{"no header", answer(), 0},
		{"zero", answer("Retry-After", "0"), 0},
		{"seconds", answer("Retry-After", "3"), 3 * time.Second},
		{"spaces", answer("Retry-After", " 3 "), 3 * time.Second},
		{"fraction", answer("Retry-After", "1.5"), 1500 * time.Millisecond},
		{"bare fraction", answer("Retry-After", ".25"), 250 * time.Millisecond},
		{"seconds past the bound", answer("Retry-After", "86401"), retryAfterBound},
		{"seconds past int64", answer("Retry-After", "99999999999999999999999"), retryAfterBound},
		{"negative", answer("Retry-After", "-3"), 0},
		{"signed", answer("Retry-After", "+3"), 0},
		{"exponent", answer("Retry-After", "1e3"), 0},
		{"hex", answer("Retry-After", "0x10"), 0},
		{"infinity", answer("Retry-After", "Inf"), 0},
		{"not a number", answer("Retry-After", "NaN"), 0},
		{"a dot", answer("Retry-After", "."), 0},
		{"words", answer("Retry-After", "soon"), 0},
		{"date ahead of Date", dated(date.Add(7 * time.Second).Format(http.TimeFormat)), 7 * time.Second},
		{"RFC 850 date", dated(date.Add(7 * time.Second).Format(time.RFC850)), 7 * time.Second},
		{"asctime date", dated(date.Add(7 * time.Second).Format(time.ANSIC)), 7 * time.Second},
		{"date equal to Date", dated(date.Format(http.TimeFormat)), 0},
		{"date before Date", dated(date.Add(-time.Minute).Format(http.TimeFormat)), 0},
		{"date past the bound", dated(date.AddDate(1, 0, 0).Format(http.TimeFormat)), retryAfterBound},
		{"date past, by the local clock", answer("Retry-After", date.Add(7*time.Second).Format(http.TimeFormat)), 0},
		{"milliseconds", answer("Retry-After-Ms", "2500"), 2500 * time.Millisecond},
		{"fractional milliseconds", answer("Retry-After-Ms", "0.5"), 500 * time.Microsecond},
		{"milliseconds before seconds", answer("Retry-After-Ms", "1250", "Retry-After", "2"), 1250 * time.Millisecond},
		{"milliseconds before a date", answer("Date", date.Format(http.TimeFormat), "Retry-After", date.Add(7*time.Second).Format(http.TimeFormat), "Retry-After-Ms", "300"), 300 * time.Millisecond},
		{"zero milliseconds", answer("Retry-After-Ms", "0", "Retry-After", "2"), 0},
		{"milliseconds past the bound", answer("Retry-After-Ms", "86400001"), retryAfterBound},
		{"unreadable milliseconds", answer("Retry-After-Ms", "-5", "Retry-After", "2"), 2 * time.Second},
		{"empty milliseconds", answer("Retry-After-Ms", "", "Retry-After", "2"), 2 * time.Second},
	} {
		if got := retryAfter(tc.res); got != tc.want {
			t.Errorf("%s: retryAfter = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRetryAfterDateWithoutDate: an HTTP-date on an answer without a
// readable Date is measured against the local clock.
func TestRetryAfterDateWithoutDate(t *testing.T) {
	at := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	for _, res := range []*http.Response{answer("Retry-After", at), answer("Retry-After", at, "Date", "yesterday")} {
		// The date has whole seconds, and a little time passes.
		if got := retryAfter(res); got < time.Hour-2*time.Second || got > time.Hour {
			t.Errorf("Retry-After %s, Date %q: retryAfter = %v, want about an hour", at, res.Header.Get("Date"), got)
		}
	}
}
