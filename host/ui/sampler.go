package ui

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// window is how far back the queue plots reach.
const window = time.Hour

// sample is one reading of a tenant's queue.
type sample struct {
	at      time.Time
	byState map[host.TaskState]int64
	ready   int64 // queued tasks ready to lease: not scheduled, not of a paused type
	oldest  time.Duration
}

func (s sample) total() int64 {
	var n int64
	for _, v := range s.byState {
		n += v
	}
	return n
}

func (s sample) finished() int64 {
	return s.byState[host.StateSucceeded] + s.byState[host.StateCanceled] + s.byState[host.StateDeadLetter]
}

// ring holds a tenant's samples of the last hour, oldest first.
type ring struct {
	buf    []sample
	viewed time.Time // last time a page showed this tenant
}

func (r *ring) add(s sample, keep time.Duration) {
	r.buf = append(r.buf, s)
	cut := 0
	for cut < len(r.buf) && s.at.Sub(r.buf[cut].at) > keep {
		cut++
	}
	if cut > 0 {
		r.buf = append(r.buf[:0], r.buf[cut:]...)
	}
}

// sampler reads QueueStats (O(1) in the number of tasks) of every tenant a
// dashboard page showed within the window, every interval, and keeps an
// hour of readings in memory. Nothing is stored: a restarted gate starts
// with an empty plot.
type sampler struct {
	st    store.Store
	every time.Duration
	now   func() time.Time

	ctx   context.Context // ends the sampling loop
	start sync.Once       // the loop starts with the first page that shows a tenant

	mu    sync.Mutex
	rings map[string]*ring
}

func newSampler(ctx context.Context, st store.Store, every time.Duration, now func() time.Time) *sampler {
	return &sampler{ctx: ctx, st: st, every: every, now: now, rings: map[string]*ring{}}
}

// run samples until ctx ends.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.tick(ctx)
		}
	}
}

// tick samples every watched tenant and forgets tenants not shown for a window.
func (s *sampler) tick(ctx context.Context) {
	now := s.now()
	s.mu.Lock()
	var tenants []string
	for t, r := range s.rings {
		if now.Sub(r.viewed) > window {
			delete(s.rings, t)
			continue
		}
		tenants = append(tenants, t)
	}
	s.mu.Unlock()
	for _, t := range tenants {
		s.take(ctx, t)
	}
}

// take reads one sample of tenant now.
func (s *sampler) take(ctx context.Context, tenant string) {
	var qs store.QueueStats
	err := s.st.View(ctx, func(r store.Reader) error {
		var err error
		qs, err = engine.QueueStats(ctx, r, tenant, s.now())
		return err
	})
	if err != nil {
		return // a gap in the plot; the next tick tries again
	}
	smp := sample{at: s.now(), byState: qs.ByState, ready: qs.ReadyQueued(), oldest: qs.OldestReadyAge}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rings[tenant]
	if r == nil {
		r = &ring{}
		s.rings[tenant] = r
	}
	r.add(smp, window)
}

// watch marks tenant as shown now and returns a copy of its samples, taking
// a first one when it has none.
func (s *sampler) watch(ctx context.Context, tenant string) []sample {
	s.start.Do(func() { go s.run(s.ctx) })
	s.mu.Lock()
	r := s.rings[tenant]
	if r == nil {
		r = &ring{}
		s.rings[tenant] = r
	}
	r.viewed = s.now()
	empty := len(r.buf) == 0
	s.mu.Unlock()
	if empty {
		s.take(ctx, tenant)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sample(nil), s.rings[tenant].buf...)
}

// rates are per-minute rates over the last few minutes of samples.
type rates struct {
	Known    bool
	Enqueued float64 // new tasks a minute
	Finished float64 // tasks reaching a terminal state a minute
	Over     time.Duration
}

// rateWindow is how far back rates look.
const rateWindow = 5 * time.Minute

func computeRates(ss []sample) rates {
	if len(ss) < 2 {
		return rates{}
	}
	last := ss[len(ss)-1]
	first := ss[0]
	for _, s := range ss {
		if last.at.Sub(s.at) <= rateWindow {
			first = s
			break
		}
	}
	dt := last.at.Sub(first.at)
	if dt <= 0 {
		return rates{}
	}
	min := dt.Minutes()
	return rates{Known: true, Over: dt.Round(time.Second),
		Enqueued: math.Max(0, float64(last.total()-first.total())/min),
		Finished: math.Max(0, float64(last.finished()-first.finished())/min)}
}

// Plot is a line chart of one series over the window, drawn as inline SVG
// by the template: the coordinates are computed here.
type Plot struct {
	Title  string
	Points string // the polyline's "x,y x,y …"
	Dots   []Dot  // the last point, so a single sample still shows
	Max    string // the y axis' top label
	Last   string // the newest value, as text
	Width  int
	Height int
	Empty  bool
}

// Dot is one marked point of a Plot.
type Dot struct{ X, Y float64 }

const plotW, plotH = 600, 120

func plot(title string, ss []sample, now time.Time, value func(sample) float64, format func(float64) string) Plot {
	p := Plot{Title: title, Width: plotW, Height: plotH}
	if len(ss) == 0 {
		p.Empty, p.Max, p.Last = true, format(0), "—"
		return p
	}
	top := 0.0
	for _, s := range ss {
		top = math.Max(top, value(s))
	}
	if top == 0 {
		top = 1
	}
	from := now.Add(-window)
	var b strings.Builder
	var x, y float64
	for i, s := range ss {
		x = float64(plotW) * float64(s.at.Sub(from)) / float64(window)
		x = math.Max(0, math.Min(plotW, x))
		y = float64(plotH) - float64(plotH-4)*value(s)/top
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatFloat(x, 'f', 1, 64) + "," + strconv.FormatFloat(y, 'f', 1, 64))
	}
	p.Points, p.Dots = b.String(), []Dot{{x, y}}
	p.Max, p.Last = format(top), format(value(ss[len(ss)-1]))
	return p
}

func count(v float64) string { return strconv.FormatInt(int64(v), 10) }

func seconds(v float64) string { return ago(time.Duration(v * float64(time.Second))) }

// ago renders a duration the way an operator reads it.
func ago(d time.Duration) string {
	switch {
	case d < time.Second:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
