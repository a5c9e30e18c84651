package mcpapi

import (
	"encoding/json"
	"mime"
	"net/http"

	"github.com/mark3labs/mcp-go/mcp"
)

// The gate answers some requests itself, ahead of mcp-go (handle). It
// answers none that mcp-go would refuse before serving it: such a request
// is handed to mcp-go, which answers it with its own refusal, in its own
// words and status. These are mcp-go's (v1.2.1) checks, made the same way
// (StreamableHTTPServer.handlePost, validateModernRequest and
// MCPServer.HandleMessage); the request itself is not changed.

// requestEra is which protocol era a request belongs to, as mcp-go decides
// it: modern (2026-07-28 or later, no sessions) when the _meta version or
// the Mcp-Protocol-Version header names such a version.
type requestEra struct {
	modern        bool
	metaVersion   string
	headerVersion string
	meta          *mcp.Meta
}

// eraOf is the era of a message with body and HTTP headers (nil on stdio).
func eraOf(header http.Header, body []byte) requestEra {
	var e requestEra
	if header != nil {
		e.headerVersion = header.Get(mcp.HeaderProtocolVersion)
	}
	var wrapper struct {
		Params struct {
			Meta *mcp.Meta `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &wrapper) == nil {
		e.meta = wrapper.Params.Meta
		e.metaVersion = e.meta.ProtocolVersion()
	}
	e.modern = mcp.IsModernProtocol(e.metaVersion) || mcp.IsModernProtocol(e.headerVersion)
	return e
}

// transportRefuses says whether mcp-go's streamable HTTP transport refuses
// r, a POST of message body whose method is method, before it serves it:
//
//   - a Content-Type other than application/json (400);
//   - before protocol 2026-07-28, an Mcp-Protocol-Version header naming a
//     version mcp-go does not know, on any request but initialize (400);
//   - from 2026-07-28 on: a Last-Event-ID header; no Mcp-Protocol-Version
//     header, or no version in _meta, or the two differing; a version this
//     transport does not serve (400, JSON-RPC -32020, -32602 or -32022);
//   - from 2026-07-28 on, an Mcp-Method header that is not the message's
//     method, or an Mcp-Name header that is not the name of the tool,
//     resource or prompt it names (-32020, 400).
func (s *Server) transportRefuses(r *http.Request, body []byte, method string) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return true
	}
	era := eraOf(r.Header, body)
	if !era.modern {
		return method != string(mcp.MethodInitialize) && era.headerVersion != "" && !mcp.IsValidProtocolVersion(era.headerVersion)
	}
	switch {
	case r.Header.Get(mcp.HeaderLastEventID) != "",
		era.headerVersion == "", era.metaVersion == "", era.headerVersion != era.metaVersion,
		!s.http.SupportsProtocolVersion(era.metaVersion):
		return true
	}
	var p struct {
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(body, &p) != nil {
		return false // mcp-go skips the header check of a body it cannot read
	}
	return mcp.ValidateStandardHeaders(r.Header.Get, era.metaVersion, mcp.MCPMethod(method), p.Params) != nil
}

// messageRefuses says whether mcp-go refuses the request m (raw, its
// bytes) as a message, on either transport, before it serves it: a
// jsonrpc other than "2.0" (-32600), and from protocol 2026-07-28 on, a
// request whose _meta does not declare the client's capabilities (-32602)
// or names a version mcp-go does not know (-32022).
func messageRefuses(m rpcMessage, raw []byte) bool {
	if m.JSONRPC != mcp.JSONRPC_VERSION {
		return true
	}
	era := eraOf(nil, raw)
	if !mcp.IsModernProtocol(era.metaVersion) {
		return false
	}
	return era.meta.ClientCapabilities() == nil || !mcp.IsValidProtocolVersion(era.metaVersion)
}

// modernStatus is the HTTP status of an answer to a request of protocol
// 2026-07-28 or later, which maps JSON-RPC errors onto HTTP statuses (as
// mcp-go answers its own): 404 for an unknown method, 400 for a request the
// client got wrong, 200 otherwise.
func modernStatus(answer []byte) int {
	var m struct {
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(answer, &m) != nil || m.Error == nil {
		return http.StatusOK
	}
	switch m.Error.Code {
	case mcp.METHOD_NOT_FOUND:
		return http.StatusNotFound
	case mcp.HEADER_MISMATCH, mcp.MISSING_REQUIRED_CLIENT_CAPABILITY, mcp.UNSUPPORTED_PROTOCOL_VERSION,
		mcp.INVALID_REQUEST, mcp.INVALID_PARAMS, mcp.PARSE_ERROR:
		return http.StatusBadRequest
	}
	return http.StatusOK
}
