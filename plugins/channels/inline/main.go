// Command inline is the built-in channel that embeds a small payload in the
// pointer itself: "inline:<base64>". Payloads over max_size_bytes (default
// 4096, at most 65536) are refused with too_large; ack is a no-op.
package main

import (
	"github.com/asyncgate/asyncgate/sdk/plugin"
	"github.com/asyncgate/asyncgate/sdk/plugin/inline"
)

type config struct {
	MaxSizeBytes int64 `json:"max_size_bytes"`
}

func (c *config) max() int64 {
	if c.MaxSizeBytes <= 0 {
		return 4096
	}
	return c.MaxSizeBytes
}

func init() {
	plugin.Channel(plugin.ChannelImpl[config]{
		Put: func(c *config, _ string, payload []byte) (plugin.PutResult, error) {
			if int64(len(payload)) > c.max() {
				return plugin.PutResult{}, plugin.Errorf("too_large", "payload exceeds the inline channel's max_size_bytes")
			}
			return plugin.PutResult{Pointer: inline.Pointer(payload)}, nil
		},
		Get: func(_ *config, pointer string) ([]byte, error) {
			b, err := inline.Payload(pointer)
			if err != nil {
				return nil, plugin.Errorf("bad_request", err.Error())
			}
			return b, nil
		},
		Capabilities: func(c *config) (plugin.Capabilities, error) {
			return plugin.Capabilities{MaxSizeBytes: c.max()}, nil
		},
	})
}

func main() {}
