package container

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// InspectDiff compares two containers' inspect JSON as inspectKeys classifies each key: what is
// reproduced from a Spec, what no Spec can say, the image's and what is derived must be equal;
// runtime state and what the engine assigns (ids, addresses, paths) are left out, and so are the
// labels whose keys start with one of ignoreLabels (meshd's: "meshd."). Each container's own id
// (whole or short, as the engine names its host name and alias) reads as "<id>", and lists whose
// order means nothing to the engine (env, binds, capabilities...) are compared as sets. It lists
// each difference as "Key: a → b"; empty is the same container.
func InspectDiff(a, b json.RawMessage, ignoreLabels ...string) ([]string, error) {
	var x, y map[string]any
	if err := json.Unmarshal(a, &x); err != nil {
		return nil, fmt.Errorf("first inspect JSON: %w", err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		return nil, fmt.Errorf("second inspect JSON: %w", err)
	}
	x, y = ownID(x), ownID(y)
	for _, m := range []map[string]any{x, y} {
		if cfg, ok := m["Config"].(map[string]any); ok {
			if ls, ok := cfg["Labels"].(map[string]any); ok {
				for k := range ls {
					for _, p := range ignoreLabels {
						if strings.HasPrefix(k, p) {
							delete(ls, k)
						}
					}
				}
			}
		}
	}
	var out []string
	var walk func(x, y map[string]any, path []string)
	walk = func(x, y map[string]any, path []string) {
		keys := map[string]bool{}
		for k := range x {
			keys[k] = true
		}
		for k := range y {
			keys[k] = true
		}
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			p := append(slices.Clone(path), k)
			name := strings.Join(p, ".")
			_, ik, classified := classifyPath(p)
			if classified && (ik.kind == keyState || ik.kind == keyAssigned) {
				continue
			}
			xc, xo := x[k].(map[string]any)
			yc, yo := y[k].(map[string]any)
			if !classified && (xo || yo) {
				walk(xc, yc, p)
				continue
			}
			cx, cy := canonJSON(x[k], name), canonJSON(y[k], name)
			if cx != cy {
				out = append(out, fmt.Sprintf("%s: %s → %s", name, cx, cy))
			}
		}
	}
	walk(x, y, nil)
	return out, nil
}

// orderedKeys are the lists whose order the engine keeps meaning to.
var orderedKeys = map[string]bool{"Args": true, "Config.Cmd": true, "Config.Entrypoint": true,
	"Config.Healthcheck.Test": true, "Config.Shell": true}

// canonJSON renders v with the lists of keys not in orderedKeys sorted, and empty values
// (null, "", 0, false, [], {}) all as "null", as sameJSON counts them.
func canonJSON(v any, path string) string {
	b, _ := json.Marshal(canon(v, path))
	s := string(b)
	switch s {
	case "null", `""`, "0", "false", "[]", "{}":
		return "null"
	}
	return s
}

func canon(v any, path string) any {
	switch t := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range t {
			out[k] = canon(e, path+"."+k)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = canon(e, path)
		}
		if !orderedKeys[path] {
			sort.Slice(out, func(i, j int) bool {
				a, _ := json.Marshal(out[i])
				b, _ := json.Marshal(out[j])
				return string(a) < string(b)
			})
		}
		return out
	}
	return v
}

// ownID replaces the container's id, whole and short, with "<id>" wherever it appears.
func ownID(m map[string]any) map[string]any {
	id, _ := m["Id"].(string)
	if len(id) < 12 {
		return m
	}
	b, _ := json.Marshal(m)
	s := strings.ReplaceAll(string(b), id, "<id>")
	s = strings.ReplaceAll(s, id[:12], "<id>")
	var out map[string]any
	_ = json.Unmarshal([]byte(s), &out)
	return out
}
