package ui

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Workflows (issue 39): a list, and a workflow's page with its steps drawn
// as a graph (columns by depth, an edge from each step to the steps waiting
// on it, each box in its task's state) and listed in a table.

var workflowStates = host.WorkflowStates

type workflowsData struct {
	State     string
	States    []host.WorkflowState
	Workflows []*host.Workflow
	Next      string
}

func (u *UI) workflows(c echo.Context) error {
	s := sessionOf(c)
	d := workflowsData{State: c.QueryParam("state"), States: workflowStates}
	wfs, cur, err := u.eng.ListWorkflows(c.Request().Context(), s.actor(),
		store.WorkflowFilter{State: host.WorkflowState(d.State), Cursor: c.QueryParam("cursor"), Limit: pageSize})
	if err != nil {
		return err
	}
	d.Workflows = wfs
	if cur != "" {
		v := url.Values{"cursor": {cur}}
		if d.State != "" {
			v.Set("state", d.State)
		}
		d.Next = "/ui/workflows?" + v.Encode()
	}
	return u.render(c, http.StatusOK, "workflows", u.newPage(c, "Workflows", "workflows", d))
}

// Graph geometry, in SVG units.
const (
	nodeW, nodeH = 150, 40
	colGap       = 60
	rowGap       = 16
	graphPad     = 10
	// maxGraphSteps is the most steps drawn; larger workflows are only listed.
	maxGraphSteps = 200
)

type graphNode struct {
	X, Y, W, H   int
	TX, TY       int // label position
	Name, TaskID string
	State        host.TaskState
	Final        bool
}

type graphEdge struct{ X1, Y1, X2, Y2 int }

type workflowGraph struct {
	Width, Height int
	Nodes         []graphNode
	Edges         []graphEdge
}

type workflowData struct {
	W     *engine.WorkflowView
	Graph *workflowGraph
	// Counts are the steps by state, in first-seen order.
	Counts []stepCount
}

type stepCount struct {
	State host.TaskState
	N     int
}

func (u *UI) workflow(c echo.Context) error {
	s := sessionOf(c)
	v, err := u.eng.GetWorkflow(c.Request().Context(), s.actor(), c.Param("id"))
	if err != nil {
		return err
	}
	d := workflowData{W: v, Graph: layoutWorkflow(v.Steps)}
	idx := map[host.TaskState]int{}
	for _, st := range v.Steps {
		i, ok := idx[st.Status]
		if !ok {
			i = len(d.Counts)
			idx[st.Status] = i
			d.Counts = append(d.Counts, stepCount{State: st.Status})
		}
		d.Counts[i].N++
	}
	return u.render(c, http.StatusOK, "workflow", u.newPage(c, "Workflow "+v.ID, "workflows", d))
}

func (u *UI) cancelWorkflow(c echo.Context) error {
	s := sessionOf(c)
	id := c.Param("id")
	wf, err := u.eng.CancelWorkflow(c.Request().Context(), s.actor(), id, strings.TrimSpace(c.FormValue("reason")))
	if err != nil {
		return err
	}
	if wf.State == host.WorkflowCanceled || wf.State == host.WorkflowArchived && wf.Outcome == host.WorkflowCanceled {
		u.flash(c, "Workflow "+id+" is canceled.")
	} else {
		u.flash(c, "Workflow "+id+" is "+string(wf.State)+": its steps not finished are canceled; it ends when its running final step does.")
	}
	return c.Redirect(http.StatusSeeOther, "/ui/workflows/"+url.PathEscape(id))
}

// layoutWorkflow places each step in the column of its depth (the longest
// chain of after edges leading to it) and draws an edge from each step to
// every step waiting on it; nil for a workflow too large to draw.
func layoutWorkflow(steps []engine.WorkflowStepView) *workflowGraph {
	if len(steps) == 0 || len(steps) > maxGraphSteps {
		return nil
	}
	index := make(map[string]int, len(steps))
	for i, s := range steps {
		index[s.Name] = i
	}
	depth := make([]int, len(steps))
	// Steps come in submitted order, not necessarily topological: relax
	// until nothing changes (at most len(steps) rounds in an acyclic graph).
	for range steps {
		changed := false
		for i, s := range steps {
			for _, a := range s.After {
				if j, ok := index[a]; ok && depth[j]+1 > depth[i] {
					depth[i], changed = depth[j]+1, true
				}
			}
		}
		if !changed {
			break
		}
	}
	rows := map[int]int{}
	g := &workflowGraph{}
	pos := make([]graphNode, len(steps))
	for i, s := range steps {
		col, row := depth[i], rows[depth[i]]
		rows[col]++
		x := graphPad + col*(nodeW+colGap)
		y := graphPad + row*(nodeH+rowGap)
		pos[i] = graphNode{X: x, Y: y, W: nodeW, H: nodeH, TX: x + 8, TY: y + 17, Name: s.Name, TaskID: s.TaskID, State: s.Status, Final: s.Final}
		if w := x + nodeW + graphPad; w > g.Width {
			g.Width = w
		}
		if h := y + nodeH + graphPad; h > g.Height {
			g.Height = h
		}
	}
	for i, s := range steps {
		for _, a := range s.After {
			if j, ok := index[a]; ok {
				g.Edges = append(g.Edges, graphEdge{X1: pos[j].X + nodeW, Y1: pos[j].Y + nodeH/2, X2: pos[i].X, Y2: pos[i].Y + nodeH/2})
			}
		}
	}
	g.Nodes = pos
	return g
}
