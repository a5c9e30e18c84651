// Command pocket is a test channel plugin: a drop-in result channel under
// a name of its own that keeps a payload in its pointer, "pocket:<base64>",
// as the inline channel does under its name. Tests drop it into a gate's
// plugins folder and take it out again.
package main

import (
	"encoding/base64"
	"strings"

	"github.com/asyncgate/asyncgate/sdk/plugin"
)

const prefix = "pocket:"

func init() {
	plugin.Channel(plugin.ChannelImpl[struct{}]{
		Put: func(_ *struct{}, _ string, payload []byte) (plugin.PutResult, error) {
			return plugin.PutResult{Pointer: prefix + base64.StdEncoding.EncodeToString(payload)}, nil
		},
		Get: func(_ *struct{}, pointer string) ([]byte, error) {
			rest, ok := strings.CutPrefix(pointer, prefix)
			if !ok {
				return nil, plugin.Errorf("bad_request", "not a pocket pointer")
			}
			b, err := base64.StdEncoding.DecodeString(rest)
			if err != nil {
				return nil, plugin.Errorf("bad_request", err.Error())
			}
			return b, nil
		},
		Capabilities: func(_ *struct{}) (plugin.Capabilities, error) {
			return plugin.Capabilities{MaxSizeBytes: 65536}, nil
		},
	})
}

func main() {}
