package plugin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// hostModule is the import module name of the host functions.
const hostModule = "asyncgate"

// maxHTTPBody caps a response body a plugin can receive through http_request.
const maxHTTPBody = 16 << 20

// instantiateHostModule defines the asyncgate host functions in the plugin's
// runtime. They exist for every plugin (so modules link), but http_request
// refuses unless the manifest asked for http and the operator allowlisted the
// target host.
//
//	http_request(req_ptr, req_len i32) -> resp_len i32
//	    req is a frame: u32 little-endian n, n bytes of JSON
//	    {"method": "...", "url": "...", "headers": {"name": "value"}}, then the
//	    body. The host makes the request under the call's deadline and keeps
//	    the response frame (u32 n, JSON {"status": int, "headers": {...}} or
//	    {"error": "...", "code": "http_denied"|"http_error"}, then the body)
//	    for http_response; it returns the frame's length.
//	http_response(ptr, len i32) -> copied i32
//	    copies the pending response frame into guest memory at ptr.
//	sha256(ptr, len, out i32) -> ok i32
//	    writes the SHA-256 of guest memory [ptr, ptr+len) to [out, out+32).
//	    Pure computation, granted to every plugin: hashing in the guest
//	    costs an exit to the host per loop iteration under wazero's
//	    termination checks (~8 MB/s), natively it runs at memory speed.
//
// mail_send, mail_fetch, mail_delete and mail_response (hostmail.go) follow
// the same pattern for plugins granted mail.
//
// Two calls instead of one avoid calling back into the guest (to allocate)
// from inside a host function, which the Go wasip1 runtime does not support.
func (p *Plugin) instantiateHostModule(ctx context.Context, wrt wazero.Runtime) error {
	_, err := wrt.NewHostModuleBuilder(hostModule).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(p.httpRequest), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).
		Export("http_request").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(httpResponse), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).
		Export("http_response").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(hostSHA256), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).
		Export("sha256").
		NewFunctionBuilder().
		WithGoModuleFunction(p.mailFunc(p.mailSend), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).
		Export("mail_send").
		NewFunctionBuilder().
		WithGoModuleFunction(p.mailFunc(p.mailFetch), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).
		Export("mail_fetch").
		NewFunctionBuilder().
		WithGoModuleFunction(p.mailFunc(p.mailDelete), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).
		Export("mail_delete").
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(httpResponse), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).
		Export("mail_response").
		Instantiate(ctx)
	return err
}

func (p *Plugin) httpRequest(ctx context.Context, mod api.Module, stack []uint64) {
	inst, _ := ctx.Value(instanceKey{}).(*instance)
	if inst == nil {
		stack[0] = 0
		return
	}
	ptr, n := uint32(stack[0]), uint32(stack[1])
	var resp []byte
	if raw, ok := mod.Memory().Read(ptr, n); !ok {
		resp = httpErrorFrame("http_error", "request frame outside guest memory")
	} else {
		resp = p.doHTTP(ctx, bytes.Clone(raw))
	}
	inst.pending = resp
	stack[0] = uint64(len(resp))
}

func httpResponse(ctx context.Context, mod api.Module, stack []uint64) {
	inst, _ := ctx.Value(instanceKey{}).(*instance)
	ptr, n := uint32(stack[0]), uint32(stack[1])
	if inst == nil || inst.pending == nil || n < uint32(len(inst.pending)) || !mod.Memory().Write(ptr, inst.pending) {
		stack[0] = 0
		return
	}
	stack[0] = uint64(len(inst.pending))
	inst.pending = nil
}

func hostSHA256(_ context.Context, mod api.Module, stack []uint64) {
	ptr, n, out := uint32(stack[0]), uint32(stack[1]), uint32(stack[2])
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		stack[0] = 0
		return
	}
	sum := sha256.Sum256(b)
	stack[0] = 0
	if mod.Memory().Write(out, sum[:]) {
		stack[0] = 1
	}
}

func httpErrorFrame(code, msg string) []byte {
	j, _ := json.Marshal(map[string]string{"error": msg, "code": code})
	return frame(j, nil)
}

func frame(j, body []byte) []byte {
	out := make([]byte, 4, 4+len(j)+len(body))
	binary.LittleEndian.PutUint32(out, uint32(len(j)))
	return append(append(out, j...), body...)
}

// allowedHost reports whether u's host is on the plugin's allowlist.
func (p *Plugin) allowedHost(u *url.URL) bool {
	for _, h := range p.grant.HTTPHosts {
		if strings.EqualFold(h, u.Host) || strings.EqualFold(h, u.Hostname()) && u.Port() == "" {
			return true
		}
	}
	return false
}

// allowedURL reports whether u may be requested: its host is allowlisted
// and, when the grant names URL prefixes, u lies under one of them.
func (p *Plugin) allowedURL(u *url.URL) bool {
	if !p.allowedHost(u) {
		return false
	}
	if len(p.grant.HTTPPrefixes) == 0 {
		return true
	}
	for _, pre := range p.grant.HTTPPrefixes {
		if URLUnder(pre, u) {
			return true
		}
	}
	return false
}

// URLUnder reports whether u lies under the URL prefix: same scheme, host
// and port (default ports filled in), no user info, and a path equal to the
// prefix's or below it at a segment boundary, with no dot segments or
// encoded slashes that could climb out of it.
func URLUnder(prefix string, u *url.URL) bool {
	b, err := url.Parse(prefix)
	if err != nil || u == nil || u.Opaque != "" || u.User != nil || u.Host == "" {
		return false
	}
	port := func(x *url.URL) string {
		if p := x.Port(); p != "" {
			return p
		}
		if strings.EqualFold(x.Scheme, "https") {
			return "443"
		}
		return "80"
	}
	if !strings.EqualFold(u.Scheme, b.Scheme) || !strings.EqualFold(u.Hostname(), b.Hostname()) || port(u) != port(b) {
		return false
	}
	ep := strings.ToLower(u.EscapedPath())
	if strings.Contains(ep, "%2f") || strings.Contains(ep, "%5c") || strings.Contains(u.Path, "\\") {
		return false
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	base := strings.TrimSuffix(b.Path, "/")
	return u.Path == base || strings.HasPrefix(u.Path, base+"/")
}

func (p *Plugin) doHTTP(ctx context.Context, raw []byte) []byte {
	if !p.Manifest.Capabilities.HTTP || len(p.grant.HTTPHosts) == 0 {
		return httpErrorFrame("http_denied", "http is not granted to this plugin")
	}
	if len(raw) < 4 || uint64(binary.LittleEndian.Uint32(raw))+4 > uint64(len(raw)) {
		return httpErrorFrame("http_error", "malformed request frame")
	}
	n := binary.LittleEndian.Uint32(raw)
	var req struct {
		Method  string            `json:"method"`
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(raw[4:4+n], &req); err != nil {
		return httpErrorFrame("http_error", "malformed request: "+err.Error())
	}
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return httpErrorFrame("http_denied", "only absolute http and https URLs are allowed")
	}
	if !p.allowedHost(u) {
		p.rt.log.Warn("plugin http request denied", "plugin", p.Manifest.Name, "host", u.Host)
		return httpErrorFrame("http_denied", fmt.Sprintf("host %s is not on this plugin's allowlist", u.Host))
	}
	if !p.allowedURL(u) {
		p.rt.log.Warn("plugin http request denied", "plugin", p.Manifest.Name, "url", u.Redacted())
		return httpErrorFrame("http_denied", fmt.Sprintf("%s is not under this plugin's granted URLs", u.Redacted()))
	}
	if req.Method == "" {
		req.Method = http.MethodGet
	}
	hreq, err := http.NewRequestWithContext(ctx, req.Method, u.String(), bytes.NewReader(raw[4+n:]))
	if err != nil {
		return httpErrorFrame("http_error", err.Error())
	}
	for k, v := range req.Headers {
		hreq.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(r *http.Request, via []*http.Request) error {
		if len(via) >= 5 || !p.allowedURL(r.URL) {
			return errors.New("redirect to a URL that is not allowlisted")
		}
		return nil
	}}
	resp, err := client.Do(hreq)
	if err != nil {
		return httpErrorFrame("http_error", err.Error())
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxHTTPBody+1))
	if err != nil {
		return httpErrorFrame("http_error", "reading response: "+err.Error())
	}
	if len(body) > maxHTTPBody {
		return httpErrorFrame("http_error", "response body too large")
	}
	hdr := map[string]string{}
	for k, v := range resp.Header {
		if len(v) > 0 {
			hdr[k] = v[0]
		}
	}
	j, _ := json.Marshal(map[string]any{"status": resp.StatusCode, "headers": hdr})
	return frame(j, body)
}
