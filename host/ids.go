package host

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"sync"
	"time"
)

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// ID prefixes. IDs are ULIDs (48-bit millisecond time, 80 random bits, Crockford
// base32) behind a prefix that names what they identify, as the seeds spell them.
const (
	PrefixTask    = "T-"
	PrefixLease   = "lease-"
	PrefixReceipt = "R-"
	PrefixKey     = "K-"
)

var idMu sync.Mutex
var idLastMs uint64
var idLastRand [10]byte

// NewID returns prefix followed by a new ULID. IDs made in the same millisecond by
// this process sort in the order they were made.
func NewID(prefix string) string {
	ms := uint64(time.Now().UnixMilli())
	idMu.Lock()
	var r [10]byte
	if ms <= idLastMs {
		ms = idLastMs
		r = idLastRand
		for i := 9; i >= 0; i-- { // increment the random part: monotonic within a millisecond
			r[i]++
			if r[i] != 0 {
				break
			}
		}
	} else {
		_, _ = rand.Read(r[:])
	}
	idLastMs, idLastRand = ms, r
	idMu.Unlock()

	return ulid(prefix, ms, r)
}

// ulid encodes prefix, then ms (48 bits) and r (80 bits) as 26 Crockford
// base32 characters.
func ulid(prefix string, ms uint64, r [10]byte) string {
	var b [16]byte
	var t [8]byte
	binary.BigEndian.PutUint64(t[:], ms)
	copy(b[0:6], t[2:8])
	copy(b[6:], r[:])
	out := make([]byte, len(prefix)+26)
	copy(out, prefix)
	enc := out[len(prefix):]
	// 128 bits -> 26 base32 chars (first char carries 3 bits).
	var hi, lo uint64 = binary.BigEndian.Uint64(b[0:8]), binary.BigEndian.Uint64(b[8:16])
	for i := 25; i >= 0; i-- {
		enc[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out)
}

// leaseRandLen is the length of a lease id's ULID part: 26 Crockford
// characters.
const leaseRandLen = 26

// NewLeaseID returns a new lease id for the task taskID: PrefixLease, a
// ULID whose 80 random bits are drawn afresh from crypto/rand (never
// incremented from the id made before it, as NewID's are within a
// millisecond), a '.', then the task's id. A lease id is a bearer
// capability; its random bits are what make it unguessable, and its
// millisecond prefix keeps the indexes that hold lease ids (SQLite's
// lease index, the completions' dedupe keys) appending near their right
// edge instead of splitting pages at random. The task id it carries only
// lets a store find the task by its unique id and compare the whole lease
// id there (LeaseTaskID), so a forged one naming another task matches
// nothing. Lease ids minted before this form (PrefixLease and a ULID, no
// '.') stay valid: LeaseTaskID reports them as carrying no task.
func NewLeaseID(taskID string) string {
	var r [10]byte
	_, _ = rand.Read(r[:])
	return ulid(PrefixLease, uint64(time.Now().UnixMilli()), r) + "." + taskID
}

// LeaseTaskID returns the task id a lease id made by NewLeaseID carries, and
// false for any other string (a lease id of the older form, a malformed
// one). It proves nothing: the caller still compares the whole lease id
// with the task's.
func LeaseTaskID(leaseID string) (string, bool) {
	n := len(PrefixLease) + leaseRandLen
	if len(leaseID) <= n+1 || leaseID[:len(PrefixLease)] != PrefixLease || leaseID[n] != '.' {
		return "", false
	}
	return leaseID[n+1:], true
}

// IsID reports whether s is an id NewID(prefix) could have made: prefix
// followed by 26 Crockford base32 characters, the first at most '7' (a
// ULID holds 128 bits). Lists paged by id use it to refuse a cursor they
// never handed out.
func IsID(prefix, s string) bool {
	if len(s) != len(prefix)+26 || s[:len(prefix)] != prefix {
		return false
	}
	u := s[len(prefix):]
	if u[0] > '7' {
		return false
	}
	for i := 0; i < len(u); i++ {
		if strings.IndexByte(crockford, u[i]) < 0 {
			return false
		}
	}
	return true
}
