package host

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"time"
)

// Hash versions of a receipt chain. Version 1 is the single global chain of
// the first schema: its hash covers the global sequence number. Version 2 is a
// per-writer chain: its hash covers the chain id and the position in the chain
// instead, so a writer can link a receipt without knowing what other writers
// append meanwhile.
const (
	ChainV1 = 1
	ChainV2 = 2
)

// ChainHashV2 computes the hash of a receipt in a per-writer chain from its
// content, its chain id and position, and its predecessor's hash in that
// chain. The genesis predecessor hash is the empty string.
func ChainHashV2(r *Receipt, prevHash string) string {
	return hashReceipt("asyncgate.receipt.v2", prevHash, []string{strconv.FormatInt(r.ChainID, 10), strconv.FormatInt(r.ChainSeq, 10)}, r)
}

// HashReceipt computes r's hash under its chain's hash version.
func HashReceipt(version int, r *Receipt, prevHash string) string {
	if version == ChainV1 {
		return ChainHash(r, prevHash)
	}
	return ChainHashV2(r, prevHash)
}

// ChainHead is the last link of one receipt chain: Seq receipts long, ending
// in the receipt whose hash is Hash ("" while empty).
type ChainHead struct {
	ID      int64  `json:"chain_id"`
	Seq     int64  `json:"seq"`
	Hash    string `json:"hash"`
	Version int    `json:"hash_version,omitempty"`
}

// Checkpoint binds the receipt chains together: it records every non-empty
// chain's head at one moment and is itself linked to the checkpoint before it.
type Checkpoint struct {
	ID       int64       `json:"checkpoint_id"`
	At       time.Time   `json:"at"`
	Heads    []ChainHead `json:"heads"`
	PrevHash string      `json:"prev_hash"`
	Hash     string      `json:"hash"`
}

// CheckpointHash computes a checkpoint's hash from its id, time, recorded
// heads (in the order given) and its predecessor's hash.
func CheckpointHash(c *Checkpoint, prevHash string) string {
	h := sha256.New()
	var n [8]byte
	put := func(s string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	put("asyncgate.checkpoint.v1")
	put(prevHash)
	put(strconv.FormatInt(c.ID, 10))
	put(strconv.FormatInt(c.At.UnixMicro(), 10))
	put(strconv.Itoa(len(c.Heads)))
	for _, hd := range c.Heads {
		put(strconv.FormatInt(hd.ID, 10))
		put(strconv.FormatInt(hd.Seq, 10))
		put(hd.Hash)
	}
	return hex.EncodeToString(h.Sum(nil))
}
