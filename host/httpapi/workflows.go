package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/engine"
	"github.com/asyncgate/asyncgate/host/store"
)

// Workflows (issue 39): submit a graph of steps, read it with its steps'
// states, list and cancel. Another principal's workflow answers 404
// not_found, as an unknown id does.

// WorkflowList is a page of workflows.
type WorkflowList struct {
	Workflows []*host.Workflow `json:"workflows"`
	Cursor    string           `json:"cursor"`
}

// CancelBody is the optional body of a cancel.
type CancelBody struct {
	Reason string `json:"reason,omitempty"`
}

func (s *Server) workflowRoutes(v1 *echo.Group, agents echo.MiddlewareFunc) {
	v1.POST("/workflows", s.submitWorkflow, agents)
	v1.GET("/workflows", s.listWorkflows, agents)
	v1.GET("/workflows/:id", s.getWorkflow, agents)
	v1.POST("/workflows/:id/cancel", s.cancelWorkflow, agents)
}

// submitWorkflow is POST /v1/workflows: 201, or 200 with is_duplicate for
// a repeated idempotency key.
func (s *Server) submitWorkflow(c echo.Context) error {
	var req engine.WorkflowRequest
	if err := bind(c, &req, strict); err != nil {
		return err
	}
	res, err := s.eng.SubmitWorkflow(c.Request().Context(), ActorOf(c), req)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if res.IsDuplicate {
		status = http.StatusOK
	}
	return c.JSON(status, res)
}

// getWorkflow is GET /v1/workflows/{id}: the workflow and its steps.
func (s *Server) getWorkflow(c echo.Context) error {
	v, err := s.eng.GetWorkflow(c.Request().Context(), ActorOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// listWorkflows is GET /v1/workflows: the caller's workflows (an admin's:
// the tenant's), newest first.
func (s *Server) listWorkflows(c echo.Context) error {
	limit, err := queryInt(c, "limit", 0)
	if err != nil {
		return err
	}
	f := store.WorkflowFilter{Cursor: c.QueryParam("cursor"), Limit: limit}
	for _, st := range splitList(c, "status") { // a comma list, as GET /v1/tasks takes
		f.States = append(f.States, host.WorkflowState(st))
	}
	wfs, cur, err := s.eng.ListWorkflows(c.Request().Context(), ActorOf(c), f)
	if err != nil {
		return err
	}
	if wfs == nil {
		wfs = []*host.Workflow{}
	}
	return c.JSON(http.StatusOK, WorkflowList{Workflows: wfs, Cursor: cur})
}

// cancelWorkflow is POST /v1/workflows/{id}/cancel.
func (s *Server) cancelWorkflow(c echo.Context) error {
	var b CancelBody
	if err := bind(c, &b, strict); err != nil {
		return err
	}
	wf, err := s.eng.CancelWorkflow(c.Request().Context(), ActorOf(c), c.Param("id"), b.Reason)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, wf)
}
