package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// TestScheduleFiresOnceAcrossHosts runs three gates' engines, each on its
// own store (its own connections) on one database, firing the same 30
// every-second schedules at once while the clock moves: every fire is
// enqueued exactly once.
func TestScheduleFiresOnceAcrossHosts(t *testing.T) {
	schema := newSchema(t)
	clock := host.NewManualClock(time.Date(2026, 1, 4, 15, 30, 0, 0, time.UTC))
	var engs []*engine.Engine
	for range 3 {
		e, err := engine.New(engine.Config{Store: openIn(t, schema, Options{Writers: 1}), Clock: clock, ScheduleTick: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		engs = append(engs, e)
	}
	ctx := context.Background()
	tt := host.NewTaskType("work")
	tt.Tenant = "acme"
	if _, err := engs[0].PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	owner := engine.Actor{Tenant: "acme", Principal: "agent.kee", Role: engine.RoleAgent}
	var ids []string
	for i := range 30 {
		v, err := engs[0].CreateSchedule(ctx, owner, engine.CreateScheduleRequest{Name: fmt.Sprint("s", i), IntervalSeconds: 1,
			Template: host.ScheduleTemplate{TaskType: "work", Params: json.RawMessage(`{}`)}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, v.ID)
	}
	const ticks = 20
	for range ticks {
		clock.Advance(time.Second)
		var wg sync.WaitGroup
		for _, e := range engs {
			for range 2 {
				wg.Go(func() {
					if _, err := e.FireSchedules(ctx); err != nil {
						t.Error(err)
					}
				})
			}
		}
		wg.Wait()
	}
	per := map[string]int{}
	if err := engs[1].Store().View(ctx, func(r store.Reader) error {
		cursor := ""
		for {
			ts, next, err := r.ListTasks(ctx, store.TaskFilter{Tenant: "acme", Cursor: cursor, Limit: 500})
			if err != nil {
				return err
			}
			for _, tk := range ts {
				per[tk.IdempotencyKey]++
			}
			if next == "" {
				return nil
			}
			cursor = next
		}
	}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		for k := 1; k <= ticks; k++ {
			key := engine.FireKey(id, clock.Now().Add(time.Duration(k-ticks)*time.Second))
			if per[key] != 1 {
				t.Fatalf("fire %s enqueued %d times", key, per[key])
			}
		}
	}
	if len(per) != len(ids)*ticks {
		t.Fatalf("%d tasks, want %d", len(per), len(ids)*ticks)
	}
}

// TestClaimSchedulesSkipsLockedRows holds one host's claim open while
// another host claims the same due schedule: the second gets nothing (it
// neither waits nor takes the row), and takes it once the first is gone
// without advancing it.
func TestClaimSchedulesSkipsLockedRows(t *testing.T) {
	schema := newSchema(t)
	a, b := openIn(t, schema, Options{Writers: 1}), openIn(t, schema, Options{Writers: 1})
	ctx := context.Background()
	now := time.Date(2026, 1, 4, 15, 30, 0, 0, time.UTC)
	s := &host.Schedule{ID: "S-1", Tenant: "acme", Owner: "agent.kee", Name: "s", IntervalSeconds: 1, AnchorAt: now,
		Template: host.ScheduleTemplate{TaskType: "work"}, MissedPolicy: host.MissedSkip, GraceSeconds: 60,
		NextFireAt: now, CreatedAt: now, UpdatedAt: now}
	if err := a.Update(ctx, func(tx store.Tx) error { return tx.InsertSchedule(ctx, s) }); err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- a.Update(ctx, func(tx store.Tx) error {
			ss, err := tx.ClaimSchedules(ctx, []string{"S-1"}, now)
			if err != nil {
				return err
			}
			if len(ss) != 1 {
				return fmt.Errorf("first claim got %d", len(ss))
			}
			close(held)
			<-release
			return fmt.Errorf("give it back")
		})
	}()
	<-held
	var once sync.Once
	giveBack := func() { once.Do(func() { close(release) }) }
	defer giveBack()
	claim := func() int {
		var n int
		if err := b.Update(ctx, func(tx store.Tx) error {
			ss, err := tx.ClaimSchedules(ctx, []string{"S-1"}, now)
			n = len(ss)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := claim(); n != 0 {
		giveBack()
		<-done
		t.Fatalf("a second host claimed a held schedule (%d)", n)
	}
	giveBack()
	if err := <-done; err == nil || err.Error() != "give it back" {
		t.Fatalf("first claim: %v", err)
	}
	if n := claim(); n != 1 {
		t.Fatalf("after the first claim rolled back, the second got %d", n)
	}
}

// TestScheduleQuotaAcrossHosts: three gates, each on its own store (its own
// connections) on one database, create schedules for one owner at once
// past its quota: the owner ends with exactly its quota, and every create
// past it is quota_exceeded.
func TestScheduleQuotaAcrossHosts(t *testing.T) {
	const limit, before, racers = 30, 20, 45
	schema := newSchema(t)
	clock := host.NewManualClock(time.Date(2026, 1, 4, 15, 30, 0, 0, time.UTC))
	var engs []*engine.Engine
	var stores []*Store
	for range 3 {
		st := openIn(t, schema, Options{})
		e, err := engine.New(engine.Config{Store: st, Clock: clock, ScheduleTick: -1, MaxSchedulesPerOwner: limit})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		engs, stores = append(engs, e), append(stores, st)
	}
	ctx := context.Background()
	tt := host.NewTaskType("work")
	tt.Tenant = "acme"
	if _, err := engs[0].PutTaskType(ctx, tt); err != nil {
		t.Fatal(err)
	}
	owner := engine.Actor{Tenant: "acme", Principal: "agent.kee", Role: engine.RoleAgent}
	tmpl := host.ScheduleTemplate{TaskType: "work", Params: json.RawMessage(`{}`)}
	for i := range before {
		if _, err := engs[0].CreateSchedule(ctx, owner, engine.CreateScheduleRequest{Name: fmt.Sprint("before", i), IntervalSeconds: 60, Template: tmpl}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := 0
	start := make(chan struct{})
	for i := range racers {
		wg.Go(func() {
			<-start
			_, err := engs[i%len(engs)].CreateSchedule(ctx, owner, engine.CreateScheduleRequest{Name: fmt.Sprint("race", i), IntervalSeconds: 60, Template: tmpl})
			switch {
			case err == nil:
				mu.Lock()
				created++
				mu.Unlock()
			case !host.IsCode(err, host.CodeQuotaExceeded):
				t.Errorf("create %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	var n int
	if err := stores[1].View(ctx, func(r store.Reader) error {
		var err error
		n, err = r.CountSchedules(ctx, owner.Tenant, owner.Principal)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n != limit || created != limit-before {
		t.Fatalf("%d creates on 3 hosts by an owner at %d of %d: %d created, the owner has %d; want %d and %d",
			racers, before, limit, created, n, limit-before, limit)
	}
}
