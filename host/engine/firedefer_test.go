package engine

import (
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host/store"
)

// TestFireDeferralsBackOff: a schedule set aside again waits twice as long,
// up to fireDeferMax; judged, it is forgotten; one set aside long ago is
// pruned and no longer counted.
func TestFireDeferralsBackOff(t *testing.T) {
	var d fireDeferrals
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	var waits []time.Duration
	for i := 0; i < 9; i++ {
		waits = append(waits, d.deferFire("S-1", now))
	}
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
		160 * time.Second, fireDeferMax, fireDeferMax, fireDeferMax}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}
	if !d.held("S-1", now.Add(fireDeferMax-time.Second)) || d.held("S-1", now.Add(fireDeferMax)) {
		t.Fatal("held does not end at the wait's end")
	}
	if d.held("S-2", now) || d.active(now) != 1 {
		t.Fatalf("another schedule held, or active %d", d.active(now))
	}
	d.clear("S-1")
	if d.deferFire("S-1", now) != fireDeferFirst {
		t.Fatal("a schedule judged since starts over")
	}
	if d.active(now.Add(fireDeferFirst + 2*fireDeferMax + time.Second)); len(d.m) != 0 {
		t.Fatalf("an old deferral is kept: %v", d.m)
	}
}

// TestKeysRevokedNoticeForgets: another host's revocation notice, and a
// resubscription that may have missed one, call the OnKeysRevoked hook;
// a tenant's wake-up does not.
func TestKeysRevokedNoticeForgets(t *testing.T) {
	eng, err := New(Config{Store: openSQLite(t), ExpiryJitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	calls := 0
	eng.OnKeysRevoked(func() { calls++ })
	ch := make(chan string, 3)
	ch <- "acme"
	ch <- store.KeysRevokedNotice
	ch <- store.NotifyEveryone
	close(ch)
	eng.forward(ch)
	if calls != 2 {
		t.Fatalf("the hook ran %d times, want 2 (the notice, the resubscription)", calls)
	}
}
