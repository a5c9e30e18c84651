package plugin

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncgate/asyncgate/host"
	"github.com/asyncgate/asyncgate/host/plugin/pluginbuild"
)

var update = flag.Bool("update", false, "rewrite the golden files' expected output")

const goldenSep = "----------"

// TestSchemasGolden runs every file in testdata/golden/plugin-schemas, Caddy
// style: a "# schema: NAME" or "# parse" line, the input document, a
// ---------- line, then the expected result ("ok" or "error: ...").
// Run with -update to rewrite the expectations.
func TestSchemasGolden(t *testing.T) {
	root, err := pluginbuild.ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "testdata/golden/plugin-schemas/*.txt"))
	if len(files) == 0 {
		t.Fatal("no golden files")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			input, want, _ := strings.Cut(string(raw), "\n"+goldenSep+"\n")
			header, doc, _ := strings.Cut(input, "\n")
			var gotErr error
			switch {
			case strings.HasPrefix(header, "# schema: "):
				gotErr = ValidateAgainst(strings.TrimPrefix(header, "# schema: "), []byte(doc))
			case header == "# parse":
				_, gotErr = ParseManifest([]byte(doc))
			default:
				t.Fatalf("first line must be '# schema: NAME' or '# parse', got %q", header)
			}
			got := "ok"
			if gotErr != nil {
				got = "error: " + gotErr.Error()
			}
			if *update {
				os.WriteFile(f, []byte(strings.TrimRight(input, "\n")+"\n"+goldenSep+"\n"+got+"\n"), 0o644)
				return
			}
			if strings.TrimSpace(want) != got {
				t.Errorf("got\n%s\nwant\n%s", got, strings.TrimSpace(want))
			}
		})
	}
}

// TestDecideTypedMatchesSchema holds the decide fast path's typed checks to
// the decide schemas: both must accept and refuse the same documents.
func TestDecideTypedMatchesSchema(t *testing.T) {
	outputs := []string{
		`{"action":"retry","delay_seconds":1.5}`, `{"action":"retry"}`, `{"action":"dead_letter","reason":"fatal_error"}`,
		`{"action":"escalate","escalate_to":"ops"}`, `{"action":"escalate"}`, `{"action":"explode"}`, `{}`,
		`{"action":"retry","delay_seconds":-1}`, `{"action":"retry","delay_seconds":31536001}`, `{"action":"retry","extra":1}`,
		`{"action":"retry","reason":"` + strings.Repeat("r", 201) + `"}`, `{"action":"escalate","escalate_to":""}`,
		`{"action":"retry","delay_seconds":"5"}`, `{"action":1}`,
	}
	for _, o := range outputs {
		schemaErr := ValidateAgainst("plugin-policy-decide.output", []byte(o))
		_, typedErr := decodeDecision([]byte(o))
		if (schemaErr == nil) != (typedErr == nil) {
			t.Errorf("%s: schema says %v, typed check says %v", o, schemaErr, typedErr)
		}
	}
	inputs := []host.FailureInput{
		{TaskID: "t", TaskType: "x", Kind: host.FailureError, Attempts: 1},
		{TaskID: "t", TaskType: "x", Kind: host.FailureExpiry, LeaseExpiries: 2},
		{TaskID: "", TaskType: "x", Kind: host.FailureError},
		{TaskID: "t", TaskType: "", Kind: host.FailureError},
		{TaskID: "t", TaskType: "x", Kind: "crash"},
		{TaskID: "t", TaskType: "x", Kind: host.FailureError, Attempts: -1},
		{TaskID: "t", TaskType: "x", Kind: host.FailureError, MaxRetries: -3},
	}
	for _, in := range inputs {
		doc, _ := json.Marshal(in)
		schemaErr := ValidateAgainst("plugin-policy-decide.input", doc)
		typedErr := checkFailureInput(in)
		if (schemaErr == nil) != (typedErr == nil) {
			t.Errorf("%s: schema says %v, typed check says %v", doc, schemaErr, typedErr)
		}
	}
}

// FuzzParseManifest checks that the manifest parser never panics and that
// whatever it accepts is a usable manifest.
func FuzzParseManifest(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","kind":"policy","version":"1.0.0","abi_version":1}`,
		`{"name":"file","kind":"channel","version":"1.0.0","abi_version":1,"capabilities":{"fs":"dir"},"config_schema":{"type":"object","properties":{"x":{"$ref":"#/$defs/y"}},"$defs":{"y":{"type":"integer"}}}}`,
		`{"name":"a","kind":"validator","version":"1.0.0","abi_version":1,"config_schema":{"$ref":"#"}}`,
		`{"name":"a","kind":"policy","version":"1.0.0","abi_version":1,"config_schema":{"$ref":"file:///etc/passwd"}}`,
		`[]`, `{"name":`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			return
		}
		if m.Name == "" || kindOps[m.Kind] == nil || m.ABIVersion != ABIVersion {
			t.Fatalf("accepted an unusable manifest: %+v", m)
		}
		_ = m.ValidateConfig(json.RawMessage(`{}`))
		_ = fmt.Sprint(m.Limits.Timeout())
	})
}
