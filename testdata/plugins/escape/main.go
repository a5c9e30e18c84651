// Command escape is a hostile test channel plugin granted a folder (/data).
// At load (capabilities) it tries every way out of that folder the guest can
// form — relative and absolute symlinks it creates, hard links, "..", and
// links planted in the folder beforehand — to read and overwrite admin.key in
// the folder's parent (or in victim_dir when configured), and writes what
// happened to /data/escape-report.txt, one line per attempt:
// "LEAK <attempt> <bytes read>", "WROTE <attempt>" or "held <attempt> <error>".
// get("escape:report") returns the report.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/asyncgate/asyncgate/sdk/plugin"
)

type config struct {
	VictimDir string `json:"victim_dir"`
}

const report = "/data/escape-report.txt"

func attack(c *config) string {
	var out strings.Builder
	read := func(name, p string) {
		b, err := os.ReadFile(p)
		if err == nil {
			fmt.Fprintf(&out, "LEAK %s %q\n", name, string(b))
			return
		}
		fmt.Fprintf(&out, "held %s %v\n", name, err)
	}
	write := func(name, p string) {
		err := os.WriteFile(p, []byte("pwned by escape\n"), 0o644)
		if err == nil {
			fmt.Fprintf(&out, "WROTE %s\n", name)
			return
		}
		fmt.Fprintf(&out, "held %s %v\n", name, err)
	}
	note := func(name string, err error) {
		if err == nil {
			fmt.Fprintf(&out, "made %s\n", name)
		} else {
			fmt.Fprintf(&out, "refused %s %v\n", name, err)
		}
	}
	// ".." in every spelling.
	read("dotdot-read", "/data/../admin.key")
	read("dotdot-nested-read", "/data/sub/../../admin.key")
	read("relative-read", "../admin.key")
	write("dotdot-write", "/data/../admin.key")
	write("dotdot-create", "/data/../escaped.txt")
	// A relative symlink to the folder's parent, and one to the host's root.
	note("symlink-up", os.Symlink("..", "/data/.up"))
	read("symlink-up-read", "/data/.up/admin.key")
	write("symlink-up-write", "/data/.up/admin.key")
	note("symlink-root", os.Symlink("../../../../../../../../../../", "/data/.esc"))
	// An absolute symlink.
	note("symlink-abs", os.Symlink("/", "/data/.abs"))
	if c.VictimDir != "" {
		v := strings.TrimPrefix(c.VictimDir, "/")
		read("symlink-root-read", "/data/.esc/"+v+"/admin.key")
		write("symlink-root-write", "/data/.esc/"+v+"/admin.key")
		read("symlink-abs-read", "/data/.abs/"+v+"/admin.key")
		note("symlink-abs-dir", os.Symlink(c.VictimDir, "/data/.absdir"))
		read("symlink-abs-dir-read", "/data/.absdir/admin.key")
		read("absolute-path-read", c.VictimDir+"/admin.key")
		write("absolute-path-write", c.VictimDir+"/admin.key")
	}
	// Hard links to the file outside, directly and through a symlink.
	note("hardlink", os.Link("/data/../admin.key", "/data/hard"))
	read("hardlink-read", "/data/hard")
	note("hardlink-via-symlink", os.Link("/data/.up/admin.key", "/data/hard2"))
	read("hardlink-via-symlink-read", "/data/hard2")
	// Links planted in the folder before the plugin loaded.
	read("planted-rel-read", "/data/planted/admin.key")
	write("planted-rel-write", "/data/planted/admin.key")
	read("planted-abs-read", "/data/planted-abs/admin.key")
	read("planted-file-read", "/data/planted-file")
	write("planted-file-write", "/data/planted-file")
	read("planted-hard-read", "/data/planted-hard")
	write("planted-hard-write", "/data/planted-hard")
	// Renaming out of the folder.
	if err := os.WriteFile("/data/mine", []byte("x"), 0o644); err == nil {
		err = os.Rename("/data/mine", "/data/../moved-out")
		if err == nil {
			out.WriteString("WROTE rename-out\n")
		} else {
			fmt.Fprintf(&out, "held rename-out %v\n", err)
		}
	}
	// The folder itself must still work.
	if err := os.MkdirAll("/data/ok/inner", 0o755); err != nil {
		fmt.Fprintf(&out, "BROKEN mkdir %v\n", err)
	} else if err := os.WriteFile("/data/ok/inner/f", []byte("inside"), 0o644); err != nil {
		fmt.Fprintf(&out, "BROKEN write %v\n", err)
	} else if b, err := os.ReadFile("/data/ok/inner/../inner/f"); err != nil || string(b) != "inside" {
		fmt.Fprintf(&out, "BROKEN read %q %v\n", b, err)
	} else if err := os.Rename("/data/ok/inner/f", "/data/ok/g"); err != nil {
		fmt.Fprintf(&out, "BROKEN rename %v\n", err)
	} else if es, err := os.ReadDir("/data/ok"); err != nil || len(es) != 2 {
		fmt.Fprintf(&out, "BROKEN readdir %v %v\n", es, err)
	} else if err := os.Remove("/data/ok/g"); err != nil {
		fmt.Fprintf(&out, "BROKEN remove %v\n", err)
	} else {
		out.WriteString("works inside\n")
	}
	return out.String()
}

func init() {
	plugin.Channel(plugin.ChannelImpl[config]{
		Put: func(*config, string, []byte) (plugin.PutResult, error) {
			return plugin.PutResult{}, plugin.Errorf("bad_request", "escape stores nothing")
		},
		Get: func(c *config, pointer string) ([]byte, error) {
			if pointer != "escape:report" {
				return nil, plugin.Errorf("not_found", "only escape:report")
			}
			b, err := os.ReadFile(report)
			if errors.Is(err, os.ErrNotExist) {
				return nil, plugin.Errorf("not_found", "no report yet")
			}
			return b, err
		},
		Capabilities: func(c *config) (plugin.Capabilities, error) {
			r := attack(c)
			if err := os.WriteFile(report, []byte(r), 0o644); err != nil {
				return plugin.Capabilities{}, err
			}
			return plugin.Capabilities{MaxSizeBytes: 1}, nil
		},
	})
}

func main() {}
