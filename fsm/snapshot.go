package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// maxSnapshot bounds what DecodeSnapshot reads: a record is kilobytes to a few megabytes.
const maxSnapshot = 256 << 20

// DecodeSnapshot reads a snapshot written by Snapshot, refusing anything else: what is not JSON,
// another format, a record that does not decode, and a record that is not whole (a node or token
// filed under another name than its own, a mode that is not adopted or converged, a module missing
// its manifest). Each error says what is wrong in words, with the byte offset or field when JSON
// is at fault.
func DecodeSnapshot(r io.Reader) (*Record, uint64, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxSnapshot+1))
	if err != nil {
		return nil, 0, fmt.Errorf("cannot be read: %w", err)
	}
	if len(b) > maxSnapshot {
		return nil, 0, fmt.Errorf("is larger than %d MiB: not a meshd record snapshot", maxSnapshot>>20)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, 0, errors.New("is empty: not a meshd record snapshot (write one with `meshd snapshot save FILE`)")
	}
	var s snapshotFile
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&s); err != nil {
		return nil, 0, fmt.Errorf("is not a meshd record snapshot (write one with `meshd snapshot save FILE`): %s", jsonProblem(err))
	}
	if dec.More() {
		return nil, 0, errors.New("is not a meshd record snapshot: something follows the snapshot's JSON object")
	}
	if s.Format != SnapshotFormat {
		if s.Format == "" {
			return nil, 0, fmt.Errorf("is not a meshd record snapshot: it has no \"format\" (want %q)", SnapshotFormat)
		}
		return nil, 0, fmt.Errorf("has snapshot format %q, not %q: written by another version of meshd, or not by meshd", s.Format, SnapshotFormat)
	}
	if len(s.Record) == 0 || string(s.Record) == "null" {
		return nil, 0, errors.New("holds no record (its \"record\" is missing)")
	}
	rec, err := UnmarshalRecord(s.Record)
	if err != nil {
		return nil, 0, fmt.Errorf("its record does not decode: %s", jsonProblem(err))
	}
	if err := rec.check(); err != nil {
		return nil, 0, fmt.Errorf("its record is not whole: %w", err)
	}
	return rec, s.Index, nil
}

// jsonProblem says what encoding/json found wrong, in words, with where.
func jsonProblem(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("not valid JSON at byte %d (%v)", syn.Offset, syn)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "the top level"
		}
		return fmt.Sprintf("%s holds a JSON %s where a %s belongs (byte %d)", field, typ.Value, typ.Type, typ.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "it ends in the middle of its JSON (cut short?)"
	}
	return err.Error()
}

// check says what makes a decoded record one Apply could not have built, first problem first
// (by sorted name, so every server says the same).
func (r *Record) check() error {
	for _, name := range sortedKeys(r.Nodes) {
		n := r.Nodes[name]
		switch {
		case n == nil:
			return fmt.Errorf("node %q is null", name)
		case n.Name != name:
			return fmt.Errorf("node %q is filed under %q", n.Name, name)
		case !nodeNameRe.MatchString(name):
			return fmt.Errorf("%q is not a node name", name)
		case !n.Mode.valid():
			return fmt.Errorf("node %s: mode %q is not adopted or converged", name, n.Mode)
		case !sort.StringsAreSorted(n.Assigned) || !sort.StringsAreSorted(n.Taken):
			return fmt.Errorf("node %s: its assigned and taken modules are not in order", name)
		}
		for _, m := range n.Taken {
			if !has(n.Assigned, m) {
				return fmt.Errorf("node %s: module %s is taken but not assigned", name, m)
			}
		}
		for _, m := range n.Assigned {
			if r.Catalogue[m] == nil {
				return fmt.Errorf("node %s: module %s is assigned but not in the catalogue", name, m)
			}
		}
	}
	for _, name := range sortedKeys(r.Catalogue) {
		m := r.Catalogue[name]
		if m == nil {
			return fmt.Errorf("module %q is null", name)
		}
		if m.Name != name {
			return fmt.Errorf("module %q is filed under %q", m.Name, name)
		}
	}
	for _, name := range sortedKeys(r.Privileged) {
		if r.Privileged[name] == nil || r.Catalogue[name] == nil {
			return fmt.Errorf("module %q is said privileged but is not in the catalogue", name)
		}
	}
	for _, h := range sortedKeys(r.Tokens) {
		t := r.Tokens[h]
		if t == nil || t.Hash != h {
			return fmt.Errorf("token %s is not filed under its own hash", abbrev(h))
		}
	}
	for _, n := range sortedKeys(r.Credentials) {
		c := r.Credentials[n]
		if c == nil || c.Name != n {
			return fmt.Errorf("operator credential %q is not filed under its own name", n)
		}
	}
	if len(r.Nodes) > 0 && r.Genesis == nil {
		return errors.New("it has nodes but no genesis")
	}
	return nil
}

func abbrev(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return strings.TrimSpace(s)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
