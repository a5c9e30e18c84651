package host

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Resource leases (seed 003, KLIS-3): temporary, named intents on resources
// ("FILE:/repo/src/x.go", "REPO:github.com/a/b", any string) held by agents or
// workers. MUTATES is exclusive; READS is shared with other READS.

// LeasePredicate says what a lease holder intends to do with a resource.
type LeasePredicate string

// Lease predicates.
const (
	PredicateReads   LeasePredicate = "READS"
	PredicateMutates LeasePredicate = "MUTATES"
)

// Conflicts reports whether two leases with these predicates on one resource
// may not be held at once: every pair but READS with READS.
func (p LeasePredicate) Conflicts(q LeasePredicate) bool {
	return p == PredicateMutates || q == PredicateMutates
}

// ResourceLeaseState is where a resource lease is in its lifecycle (KLIS-3 §4):
// active, then released or expired, both terminal.
type ResourceLeaseState string

// Resource lease states.
const (
	ResourceLeaseActive   ResourceLeaseState = "active"
	ResourceLeaseReleased ResourceLeaseState = "released"
	ResourceLeaseExpired  ResourceLeaseState = "expired"
)

// PrefixResourceLease starts the id of a resource lease; PrefixManifest the id
// of the manifest its leases were granted together with.
const (
	PrefixResourceLease = "rlease-"
	PrefixManifest      = "manifest-"
)

// MaxResourceLen bounds a normalized resource name, in bytes.
const MaxResourceLen = 512

// ResourceLease is one granted intent on one resource (KLIS-3 §2.1).
type ResourceLease struct {
	ID        string             `json:"lease_id"`
	Tenant    string             `json:"-"`
	Resource  string             `json:"resource"`
	Predicate LeasePredicate     `json:"predicate"`
	Holder    string             `json:"holder"`
	State     ResourceLeaseState `json:"state"`
	// ManifestID names the acquire call whose leases were granted together.
	ManifestID string `json:"manifest_id"`
	// PriorityAt is the immutable wait-die timestamp of the request that
	// acquired the lease: older requests may wait for it, younger ones die.
	PriorityAt time.Time `json:"priority_at"`
	AcquiredAt time.Time `json:"acquired_at"`
	// ExpiresAt is the instant from which the lease is no longer honoured,
	// by the server clock.
	ExpiresAt time.Time `json:"expires_at"`
	TTLMs     int64     `json:"ttl_ms"`
	// EndedAt is when the lease was released, or its expiry once it is
	// recorded as expired.
	EndedAt *time.Time `json:"ended_at,omitempty"`
	// Restarting is set when the holder declared DIE_RESTART: the lease is
	// kept through the grace period, and heartbeats are refused until the
	// holder runs VERIFY_ALL.
	Restarting bool `json:"restarting,omitempty"`
	// GraceUsed is set once the lease had its one grace period.
	GraceUsed bool `json:"grace_used,omitempty"`
	// TaskID names the task the lease is held for, when a task named it.
	TaskID string `json:"task_id,omitempty"`
	// FencingToken is the grant's number on its resource: every grant of a
	// resource gets a token greater than every earlier grant's, on every
	// host and across restarts. A holder passes it with each change it makes
	// to the protected system, which refuses a token lower than the highest
	// it has seen: a holder that stalled past its expiry is then refused
	// after the next holder wrote (docs/http.md "Fencing tokens").
	FencingToken int64 `json:"fencing_token"`
}

// LiveAt reports whether the lease is honoured at now: active and now is
// strictly before ExpiresAt.
func (l *ResourceLease) LiveAt(now time.Time) bool {
	return l.State == ResourceLeaseActive && now.Before(l.ExpiresAt)
}

// StateAt is the lease's state as seen at now: an active lease past its
// expiry is expired even before the sweeper records it.
func (l *ResourceLease) StateAt(now time.Time) ResourceLeaseState {
	if l.State == ResourceLeaseActive && !now.Before(l.ExpiresAt) {
		return ResourceLeaseExpired
	}
	return l.State
}

// ResourceLeaseEventKind names an entry of the resource lease audit trail.
type ResourceLeaseEventKind string

// Audit trail entries.
const (
	ResourceEventGranted   ResourceLeaseEventKind = "granted"
	ResourceEventHeartbeat ResourceLeaseEventKind = "heartbeat"
	ResourceEventReleased  ResourceLeaseEventKind = "released"
	ResourceEventExpired   ResourceLeaseEventKind = "expired"
	ResourceEventGrace     ResourceLeaseEventKind = "grace"    // DIE_RESTART declared
	ResourceEventVerified  ResourceLeaseEventKind = "verified" // the holder resumed after VERIFY_ALL
	ResourceEventRevoked   ResourceLeaseEventKind = "revoked"  // an operator ended the lease
)

// ResourceLeaseEvent is one entry of the audit trail: what happened to a lease,
// at which server time, and its expiry before and after.
type ResourceLeaseEvent struct {
	Seq       int64                  `json:"seq"`
	Tenant    string                 `json:"-"`
	LeaseID   string                 `json:"lease_id"`
	Resource  string                 `json:"resource"`
	Predicate LeasePredicate         `json:"predicate"`
	Holder    string                 `json:"holder"`
	Kind      ResourceLeaseEventKind `json:"kind"`
	// At is the server time at which the change was decided.
	At time.Time `json:"at"`
	// PrevExpiresAt is the expiry the lease had before the change (nil for a grant).
	PrevExpiresAt *time.Time `json:"prev_expires_at,omitempty"`
	// ExpiresAt is the expiry after the change.
	ExpiresAt time.Time `json:"expires_at"`
}

// NormalizeResource returns the canonical form of a resource name or a
// CodeInvalidResource error naming the rule it breaks. Surrounding space is
// trimmed; the name is put in Unicode NFKC, which folds compatibility forms
// (full-width "ＦＩＬＥ：" is "FILE:", "ﬁ" is "fi"); a KIND: prefix (letters,
// digits, "_", starting with a letter) is upper-cased; a FILE: path is
// cleaned ("a/./b/../c" is "a/c"). Names are 1..MaxResourceLen bytes of
// valid UTF-8 without control or format characters (zero-width characters,
// bidi controls, variation selectors and other invisible ones are refused),
// and no word of a name mixes scripts (checkScripts).
func NormalizeResource(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", Errorf(CodeInvalidResource, "resource: must not be empty")
	}
	if !utf8.ValidString(s) {
		return "", Errorf(CodeInvalidResource, "resource: must be valid UTF-8")
	}
	if len(s) > 4*MaxResourceLen {
		return "", Errorf(CodeInvalidResource, "resource: at most %d bytes (this one is %d)", MaxResourceLen, len(s))
	}
	// One name however its characters are written: NFKC makes "é" typed as
	// U+00E9 or as "e" and U+0301 one resource, and a full-width or
	// otherwise compatibility-encoded letter the letter it stands for (so
	// "ＦＩＬＥ：/a" is the FILE:/a it looks like). It runs first: it may
	// make a "/" or a ":" of a look-alike. The steps below only trim at the
	// ends and drop whole path segments between "/", which keep a string in
	// NFKC, so normalizing once is enough.
	s = strings.TrimSpace(norm.NFKC.String(s))
	for _, r := range s {
		if invisible(r) {
			return "", Errorf(CodeInvalidResource, "resource: must not contain control characters or format characters (found %U)", r)
		}
	}
	rest := s
	if i := strings.IndexByte(s, ':'); i > 0 && validKind(s[:i]) {
		kind := strings.ToUpper(s[:i])
		rest = strings.TrimSpace(s[i+1:])
		if kind == "FILE" {
			// Cleaning and trimming until neither changes the path: each
			// round that changes it makes it shorter, so this ends, and the
			// result is a fixed point (normalizing it again changes nothing).
			for rest != "" {
				next := strings.TrimSpace(path.Clean(rest))
				if next == rest {
					break
				}
				rest = next
			}
		}
		if rest == "" {
			return "", Errorf(CodeInvalidResource, "resource: %s: needs a name after the colon", kind)
		}
		s = kind + ":" + rest
	}
	if len(s) > MaxResourceLen {
		return "", Errorf(CodeInvalidResource, "resource: at most %d bytes (this one is %d)", MaxResourceLen, len(s))
	}
	if err := checkScripts(rest); err != nil {
		return "", err
	}
	return s, nil
}

// invisible reports whether r is a control or format character, or
// another one that is not displayed: such a character makes a name that
// looks like another but is not.
func invisible(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Variation_Selector,
		unicode.Other_Default_Ignorable_Code_Point, unicode.Co, unicode.Cs, unicode.Noncharacter_Code_Point)
}

// allowedMixes are the scripts one word may combine (UTS #39 "Highly
// Restrictive": Latin with the scripts written beside it in Japanese,
// Chinese and Korean).
var allowedMixes = [][]*unicode.RangeTable{
	{unicode.Latin, unicode.Han, unicode.Hiragana, unicode.Katakana},
	{unicode.Latin, unicode.Han, unicode.Bopomofo},
	{unicode.Latin, unicode.Han, unicode.Hangul},
}

// checkScripts refuses a name with a word that mixes scripts: "pаypal"
// with a Cyrillic "а" looks like "paypal" and is another resource. A word
// is a run of letters, marks and digits (names split at punctuation,
// symbols and spaces: "FILE:/docs/документ.txt" has the words docs,
// документ and txt, each of one script). Common and Inherited characters
// go with any script; a word may combine only the scripts of one
// allowedMixes entry. Whole-script look-alikes (a word all in Cyrillic that
// looks Latin) are not caught: UTS #39's confusable data is not at hand.
func checkScripts(name string) error {
	var word []*unicode.RangeTable
	flush := func() error {
		if len(word) > 1 && !oneMix(word) {
			names := make([]string, len(word))
			for i, t := range word {
				names[i] = scriptName(t)
			}
			return Errorf(CodeInvalidResource, "resource: a word mixes the scripts %s (a name that looks like another must not be another)", strings.Join(names, " and "))
		}
		word = word[:0]
		return nil
	}
	for _, r := range name {
		if !unicode.IsLetter(r) && !unicode.IsMark(r) && !unicode.IsDigit(r) && !unicode.IsNumber(r) {
			if err := flush(); err != nil {
				return err
			}
			continue
		}
		t := scriptOf(r)
		if t == nil || slices.Contains(word, t) {
			continue
		}
		word = append(word, t)
	}
	return flush()
}

// scriptOf returns r's script, nil for Common and Inherited.
func scriptOf(r rune) *unicode.RangeTable {
	if r < utf8.RuneSelf {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' {
			return unicode.Latin
		}
		return nil
	}
	if unicode.Is(unicode.Common, r) || unicode.Is(unicode.Inherited, r) {
		return nil
	}
	for _, t := range unicode.Scripts {
		if unicode.Is(t, r) {
			return t
		}
	}
	return nil
}

func scriptName(t *unicode.RangeTable) string {
	for n, s := range unicode.Scripts {
		if s == t {
			return n
		}
	}
	return "?"
}

func oneMix(word []*unicode.RangeTable) bool {
	for _, mix := range allowedMixes {
		all := true
		for _, t := range word {
			all = all && slices.Contains(mix, t)
		}
		if all {
			return true
		}
	}
	return false
}

func validKind(k string) bool {
	if len(k) > 32 {
		return false
	}
	for i, r := range k {
		switch {
		case r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case i > 0 && (r >= '0' && r <= '9' || r == '_'):
		default:
			return false
		}
	}
	return true
}

// ParsePredicate accepts READS or MUTATES (any case).
func ParsePredicate(s string) (LeasePredicate, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case string(PredicateReads):
		return PredicateReads, nil
	case string(PredicateMutates):
		return PredicateMutates, nil
	}
	return "", Errorf(CodeBadRequest, "predicate: must be READS or MUTATES, not %q", s)
}

// SeenBy returns the lease as principal sees it from the lease alone: the
// task it is held for is named to its holder and to an admin (admin); to
// anyone else the lease shows without task_id, as another principal's task
// answers like an unknown one everywhere else. (The engine also names it
// to those who may see the task: its creator and recipient.)
func (l *ResourceLease) SeenBy(principal string, admin bool) *ResourceLease {
	if l == nil || l.TaskID == "" || admin || l.Holder == principal {
		return l
	}
	c := *l
	c.TaskID = ""
	return &c
}

// String renders a lease for error details.
func (l *ResourceLease) String() string {
	return fmt.Sprintf("%s (%s %s by %s, expires %s)", l.ID, l.Predicate, l.Resource, l.Holder, l.ExpiresAt.Format(time.RFC3339Nano))
}

// ResourceIntent is one (resource, predicate) pair of an intent manifest.
type ResourceIntent struct {
	Resource  string         `json:"resource"`
	Predicate LeasePredicate `json:"predicate"`
}

// MaxTaskResourceIntents caps the resource intents of one task type.
const MaxTaskResourceIntents = 16

// NormalizeIntents validates and normalizes an intent manifest: names
// normalized, predicates READS or MUTATES, one intent per resource (MUTATES
// wins), sorted by resource. field names the list in errors; callers cap
// its length.
func NormalizeIntents(field string, in []ResourceIntent) ([]ResourceIntent, error) {
	if len(in) == 0 {
		return nil, nil
	}
	by := map[string]LeasePredicate{}
	for i, it := range in {
		res, err := NormalizeResource(it.Resource)
		if err != nil {
			return nil, Errorf(CodeInvalidResource, "%s[%d].%s", field, i, ErrorDetail(err))
		}
		p, err := ParsePredicate(string(it.Predicate))
		if err != nil {
			return nil, Errorf(CodeBadRequest, "%s[%d].%s", field, i, ErrorDetail(err))
		}
		if by[res] != PredicateMutates {
			by[res] = p
		}
	}
	out := make([]ResourceIntent, 0, len(by))
	for r, p := range by {
		out = append(out, ResourceIntent{Resource: r, Predicate: p})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out, nil
}

// IntentsJSON is how a task's intents are stored: a JSON array, "" for none.
func IntentsJSON(in []ResourceIntent) string {
	if len(in) == 0 {
		return ""
	}
	b, _ := json.Marshal(in)
	return string(b)
}

// IntentsFromJSON reads what IntentsJSON wrote, normalized again
// (NormalizeStoredIntents): a task queued by a gate whose names were not
// yet in NFKC must lock what a name typed today locks.
func IntentsFromJSON(s string) ([]ResourceIntent, error) {
	if s == "" {
		return nil, nil
	}
	var out []ResourceIntent
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("stored resource intents: %w", err)
	}
	return NormalizeStoredIntents(out), nil
}

// NormalizeStoredIntents normalizes intents that were valid when stored:
// each name goes through NormalizeResource, and one today's rules refuse
// (a format character, a word mixing scripts) keeps its stored spelling,
// so what a gate accepted before keeps working. Predicates that do not
// parse are MUTATES, the safe side. Merged and sorted as NormalizeIntents.
func NormalizeStoredIntents(in []ResourceIntent) []ResourceIntent {
	if len(in) == 0 {
		return nil
	}
	by := map[string]LeasePredicate{}
	for _, it := range in {
		res := StoredResource(it.Resource)
		p, err := ParsePredicate(string(it.Predicate))
		if err != nil {
			p = PredicateMutates
		}
		if by[res] != PredicateMutates {
			by[res] = p
		}
	}
	out := make([]ResourceIntent, 0, len(by))
	for r, p := range by {
		out = append(out, ResourceIntent{Resource: r, Predicate: p})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Resource < out[j].Resource })
	return out
}

// StoredResource is the name a stored resource name stands for today: its
// normalized form, or the stored spelling when today's rules refuse it.
func StoredResource(name string) string {
	if n, err := NormalizeResource(name); err == nil {
		return n
	}
	return name
}
