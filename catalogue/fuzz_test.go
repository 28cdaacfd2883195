package catalogue

import (
	"strings"
	"testing"
)

// FuzzParse feeds the manifest parser arbitrary bytes, starting from the shipped catalogue and
// the tests' manifests. Whatever it is given it returns a module or errors, never panics; a
// module it accepts resolves with its defaults, and what it declares holds no control character
// in a path and no container name that is not one.
func FuzzParse(f *testing.F) {
	for _, s := range DefaultSources() {
		f.Add([]byte(s.Data))
	}
	for _, s := range []string{good, settable, "", "name: x\n---\nname: y\n", "name: [x", "name: x\nsettings: {a: [1]}\n",
		"name: x\nfiles:\n  - {path: \"/etc/a\\nb\", content: x, owner: \"-1\"}\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse("fuzz.yaml", data)
		if err != nil {
			if m != nil {
				t.Fatalf("Parse returned a module and an error: %v", err)
			}
			for _, e := range err.(Errors) {
				if e.File != "fuzz.yaml" {
					t.Fatalf("an error does not name the file: %v", e)
				}
			}
			return
		}
		r, err := m.Resolve(nil)
		if err != nil {
			t.Fatalf("an accepted manifest does not resolve with its defaults: %v", err)
		}
		for _, f := range r.Files {
			if strings.ContainsAny(f.Path, "\x00\n\r") {
				t.Fatalf("accepted path %q", f.Path)
			}
		}
		for _, c := range r.Containers {
			if !ctrNameRe.MatchString(c.Name) {
				t.Fatalf("accepted container name %q", c.Name)
			}
		}
	})
}
