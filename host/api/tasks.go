package api

import (
	"encoding/json"
	"time"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/store"
)

// ProgressResponse is the answer of GET /v1/tasks/{id}/progress.
type ProgressResponse struct {
	TaskID          string           `json:"task_id"`
	Status          host.TaskState   `json:"status"`
	ProgressPercent *float64         `json:"progress_percent,omitempty"`
	ProgressMessage string           `json:"progress_message,omitempty"`
	Progress        []store.Progress `json:"progress"`
}

// ResultResponse is the answer of GET /v1/tasks/{id}/result. Content is the
// payload when it is JSON; other payloads come as content_base64.
type ResultResponse struct {
	TaskID         string          `json:"task_id"`
	Channel        string          `json:"channel,omitempty"`
	ResultPointer  string          `json:"result_pointer,omitempty"`
	ResultChecksum string          `json:"result_checksum,omitempty"`
	ChecksumValid  *bool           `json:"checksum_valid,omitempty"`
	Content        json.RawMessage `json:"content,omitempty"`
	ContentBase64  string          `json:"content_base64,omitempty"`
	Summary        string          `json:"summary,omitempty"`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
	Artifacts      []host.Artifact `json:"artifacts,omitempty"`
	DeliveryProof  json.RawMessage `json:"delivery_proof,omitempty"`
	ArchivedAt     *time.Time      `json:"archived_at,omitempty"`
}

// ObligationsResponse is the Architecture document's /v1/obligations/open shape.
type ObligationsResponse struct {
	Server          ServerInfo        `json:"server"`
	Relationship    Relationship      `json:"relationship"`
	OpenObligations []host.Obligation `json:"open_obligations"`
	Cursor          string            `json:"cursor"`
}

// ServerInfo describes the gate answering.
type ServerInfo struct {
	Name    string    `json:"name"`
	Version string    `json:"version"`
	Time    time.Time `json:"time"`
	Driver  string    `json:"store"`
}

// Relationship says whose obligations these are.
type Relationship struct {
	Tenant    string `json:"tenant"`
	Principal string `json:"principal"`
	// Role is "obligor" (owes), "obligee" (is owed) or "" (both).
	Role string `json:"role,omitempty"`
	// CallerRole is the caller's key role.
	CallerRole string `json:"caller_role"`
}

// ReceiptResponse is a receipt with the receipt that terminated it, if any.
type ReceiptResponse struct {
	*host.Receipt
	TerminatedBy string `json:"terminated_by,omitempty"`
	Duplicate    bool   `json:"duplicate,omitempty"`
}

// InboxList is a page of inbox items.
type InboxList struct {
	Recipient string           `json:"recipient"`
	Items     []host.InboxItem `json:"items"`
	Cursor    string           `json:"cursor"`
}

// ArchivedEmail is the answer of archive_task_email.
type ArchivedEmail struct {
	TaskID     string     `json:"task_id"`
	Status     string     `json:"status"` // "archived"
	ArchivedAt *time.Time `json:"archived_at,omitempty"`
}
