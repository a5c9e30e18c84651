// Command http is the built-in push channel. put POSTs the payload to the
// configured endpoint (through the host's http_request, limited to the
// operator's grant) and returns "http:<url>" where url is the response's
// Location header, or <endpoint>/<task_id>; the result carries a delivery
// proof (status, url, sha256, size, and the receiver's X-Receipt header if
// any). get GETs the URL; ack sends DELETE when delete_on_ack is set.
//
// Every URL the channel hands out or reaches, with the operator's headers,
// lies under its base (base_url, default the endpoint): same scheme, host and
// port, and a path at or below the base's path, with no dot segments. A
// Location or pointer anywhere else is refused, so the configured
// credentials go nowhere else.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"

	"github.com/asyncgate/asyncgate/sdk/plugin"
)

type config struct {
	Endpoint     string            `json:"endpoint"`
	BaseURL      string            `json:"base_url"`
	Headers      map[string]string `json:"headers"`
	MaxSizeBytes int64             `json:"max_size_bytes"`
	DeleteOnAck  bool              `json:"delete_on_ack"`
}

func (c *config) max() int64 {
	if c.MaxSizeBytes <= 0 {
		return 10 << 20
	}
	return c.MaxSizeBytes
}

// base is the URL every result lies under.
func (c *config) base() string {
	if c.BaseURL != "" {
		return c.BaseURL
	}
	return c.Endpoint
}

// defaultPort returns u's port, or the scheme's default.
func defaultPort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}

// under reports whether raw is an absolute URL under base: same scheme, host
// and port, no user info, and a path equal to the base's or below it (at a
// segment boundary), free of dot segments and encoded slashes.
func under(base, raw string) bool {
	b, err := url.Parse(base)
	if err != nil {
		return false
	}
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" || u.User != nil || u.Host == "" {
		return false
	}
	if !strings.EqualFold(u.Scheme, b.Scheme) || !strings.EqualFold(u.Hostname(), b.Hostname()) || defaultPort(u) != defaultPort(b) {
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
	prefix := strings.TrimSuffix(b.Path, "/")
	return u.Path == prefix || strings.HasPrefix(u.Path, prefix+"/")
}

func headers(c *config, extra map[string]string) map[string]string {
	h := map[string]string{}
	for k, v := range c.Headers {
		h[k] = v
	}
	for k, v := range extra {
		h[k] = v
	}
	return h
}

func put(c *config, taskID string, payload []byte) (plugin.PutResult, error) {
	if c.Endpoint == "" {
		return plugin.PutResult{}, plugin.Errorf("invalid_config", "no endpoint configured")
	}
	resp, err := plugin.HTTP(plugin.HTTPRequest{
		Method: "POST", URL: c.Endpoint, Body: payload,
		Headers: headers(c, map[string]string{"Content-Type": "application/octet-stream", "X-Asyncgate-Task-Id": taskID}),
	})
	if err != nil {
		return plugin.PutResult{}, err
	}
	if resp.Status < 200 || resp.Status > 299 {
		return plugin.PutResult{}, plugin.Errorf("delivery_failed", "endpoint answered "+strconv.Itoa(resp.Status))
	}
	loc := resp.Headers["Location"]
	if loc == "" {
		loc = strings.TrimSuffix(c.Endpoint, "/") + "/" + url.PathEscape(taskID)
	} else if base, err := url.Parse(c.Endpoint); err == nil {
		if ref, err := base.Parse(loc); err == nil {
			loc = ref.String()
		}
	}
	if !under(c.base(), loc) {
		return plugin.PutResult{}, plugin.Errorf("delivery_failed", "the endpoint's Location "+loc+" is not under the channel's base "+c.base())
	}
	sum := sha256.Sum256(payload)
	proof, _ := json.Marshal(map[string]any{
		"status": resp.Status, "url": loc, "sha256": hex.EncodeToString(sum[:]),
		"size": len(payload), "receipt": resp.Headers["X-Receipt"],
	})
	return plugin.PutResult{Pointer: "http:" + loc, Proof: proof}, nil
}

// target returns the URL a pointer names, refusing any that is not under
// the channel's base.
func target(c *config, pointer string) (string, error) {
	u, ok := strings.CutPrefix(pointer, "http:")
	if !ok || !(strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://")) {
		return "", plugin.Errorf("bad_request", "an http pointer is http:<absolute URL>")
	}
	if !under(c.base(), u) {
		return "", plugin.Errorf("bad_request", "the pointer's URL is not under the channel's base "+c.base())
	}
	return u, nil
}

func get(c *config, pointer string) ([]byte, error) {
	u, err := target(c, pointer)
	if err != nil {
		return nil, err
	}
	resp, err := plugin.HTTP(plugin.HTTPRequest{Method: "GET", URL: u, Headers: headers(c, nil)})
	if err != nil {
		return nil, err
	}
	switch {
	case resp.Status == 404 || resp.Status == 410:
		return nil, plugin.Errorf("not_found", "no such result")
	case resp.Status < 200 || resp.Status > 299:
		return nil, plugin.Errorf("fetch_failed", "GET answered "+strconv.Itoa(resp.Status))
	}
	return resp.Body, nil
}

func ack(c *config, pointer string) error {
	u, err := target(c, pointer)
	if err != nil || !c.DeleteOnAck {
		return err
	}
	resp, err := plugin.HTTP(plugin.HTTPRequest{Method: "DELETE", URL: u, Headers: headers(c, nil)})
	if err != nil {
		return err
	}
	if resp.Status >= 300 && resp.Status != 404 {
		return plugin.Errorf("ack_failed", "DELETE answered "+strconv.Itoa(resp.Status))
	}
	return nil
}

func init() {
	plugin.Channel(plugin.ChannelImpl[config]{
		Put: put, Get: get, Ack: ack,
		Capabilities: func(c *config) (plugin.Capabilities, error) {
			return plugin.Capabilities{MaxSizeBytes: c.max()}, nil
		},
	})
}

func main() {}
