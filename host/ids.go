package host

import (
	"crypto/rand"
	"encoding/binary"
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
