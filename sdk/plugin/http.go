package plugin

import (
	"encoding/binary"
	"sort"
	"strconv"
)

// HTTPRequest is a request a plugin asks the host to make. The host makes it
// only when the operator granted the plugin HTTP and the URL's host is on the
// plugin's allowlist.
type HTTPRequest struct {
	Method  string
	URL     string
	Headers map[string]string
	Body    []byte
}

// HTTPResponse is the host's answer to an HTTPRequest.
type HTTPResponse struct {
	Status  int
	Headers map[string]string // first value of each header, canonical names
	Body    []byte
}

// HTTP makes req through the host function asyncgate.http_request. A refused
// or failed request returns an *Error with code "http_denied" or "http_error".
func HTTP(req HTTPRequest) (HTTPResponse, error) {
	j := AppendString(append(make([]byte, 4, 128), `{"method":`...), req.Method)
	j = AppendString(append(j, `,"url":`...), req.URL)
	j = append(j, `,"headers":{`...)
	keys := make([]string, 0, len(req.Headers))
	for k := range req.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if i > 0 {
			j = append(j, ',')
		}
		j = append(AppendString(j, k), ':')
		j = AppendString(j, req.Headers[k])
	}
	j = append(j, "}}"...)
	binary.LittleEndian.PutUint32(j, uint32(len(j)-4))
	frame := append(j, req.Body...)
	raw, err := roundTrip(frame)
	if err != nil {
		return HTTPResponse{}, err
	}
	if len(raw) < 4 {
		return HTTPResponse{}, Errorf("http_error", "short response frame")
	}
	n := binary.LittleEndian.Uint32(raw)
	if uint64(n)+4 > uint64(len(raw)) {
		return HTTPResponse{}, Errorf("http_error", "bad response frame")
	}
	v, err := ParseJSON(raw[4 : 4+n])
	if err != nil {
		return HTTPResponse{}, Errorf("http_error", err.Error())
	}
	if e, ok := v.Get("error"); ok && e.Str != "" {
		code := "http_error"
		if c, ok := v.Get("code"); ok && c.Str != "" {
			code = c.Str
		}
		return HTTPResponse{}, Errorf(code, e.Str)
	}
	resp := HTTPResponse{Headers: map[string]string{}, Body: raw[4+n:]}
	if s, ok := v.Get("status"); ok {
		resp.Status, _ = strconv.Atoi(s.Str)
	}
	if h, ok := v.Get("headers"); ok {
		for i, k := range h.Keys {
			resp.Headers[k] = h.Vals[i].Str
		}
	}
	return resp, nil
}
