package schemas

import _ "embed"

// ConfigSchema is the JSON Schema of the gate's config file (gate serve --config).
//
//go:embed config.schema.json
var ConfigSchema []byte
