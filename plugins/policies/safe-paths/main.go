// Command safe-paths is the built-in validator that refuses task params that
// could escape a worker's folders: any string param containing a NUL byte;
// and, in the configured keys (all string params when none are configured),
// paths with a ".." segment or absolute paths outside the configured roots.
package main

import (
	"strconv"
	"strings"

	"github.com/asyncgate/asyncgate/sdk/plugin"
)

type config struct {
	Keys  []string `json:"keys"`  // param names whose values are paths (at any depth); empty means every string
	Roots []string `json:"roots"` // absolute folders absolute paths must be inside; empty means no absolute paths
}

func validate(in plugin.ValidateInput, c *config) ([]plugin.Violation, error) {
	var out []plugin.Violation
	walk(in.Params, "", false, c, &out)
	return out, nil
}

func isKey(c *config, key string) bool {
	if len(c.Keys) == 0 {
		return true
	}
	for _, k := range c.Keys {
		if k == key {
			return true
		}
	}
	return false
}

// walk visits every string under v. path is v's JSON pointer; isPath says
// whether v sits under a configured key.
func walk(v plugin.Value, path string, isPath bool, c *config, out *[]plugin.Violation) {
	if len(*out) >= 50 {
		return
	}
	switch v.Kind {
	case plugin.KindObject:
		for i, k := range v.Keys {
			if strings.IndexByte(k, 0) >= 0 {
				*out = append(*out, plugin.Violation{Key: path, Message: "key contains a NUL byte"})
				continue
			}
			walk(v.Vals[i], path+"/"+escape(k), isPath || isKey(c, k), c, out)
		}
	case plugin.KindArray:
		for i, it := range v.Items {
			walk(it, path+"/"+strconv.Itoa(i), isPath, c, out)
		}
	case plugin.KindString:
		if msg := check(v.Str, isPath, c); msg != "" {
			*out = append(*out, plugin.Violation{Key: path, Message: msg})
		}
	}
}

func check(s string, isPath bool, c *config) string {
	if strings.IndexByte(s, 0) >= 0 {
		return "contains a NUL byte"
	}
	if !isPath {
		return ""
	}
	p := strings.ReplaceAll(s, "\\", "/")
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return "path has a .. segment"
		}
	}
	abs := strings.HasPrefix(p, "/") || (len(p) >= 2 && p[1] == ':')
	if !abs {
		return ""
	}
	for _, r := range c.Roots {
		r = strings.TrimSuffix(strings.ReplaceAll(r, "\\", "/"), "/")
		if p == r || strings.HasPrefix(p, r+"/") {
			return ""
		}
	}
	return "absolute path outside the allowed roots"
}

func escape(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

func init() { plugin.Validator(validate) }

func main() {}
