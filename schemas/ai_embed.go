package schemas

import _ "embed"

// AIProfileSchema is the JSON Schema of an AI worker instruction profile
// (worker/ai, gate ai-worker --profiles).
//
//go:embed ai-profile.schema.json
var AIProfileSchema []byte
