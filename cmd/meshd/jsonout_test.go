package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// Issue 36: a group of commands and a command that prints no data refuse --json before cobra
// prints help or text on stdout; every other command is left to run.
func TestJSONRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"check", "--json"}, "group of commands (reach)"},
		{[]string{"operator", "raft", "--json"}, "group of commands"},
		{[]string{"completion", "bash", "--json"}, "a shell script"},
		{[]string{"config", "example", "--json=true"}, "a YAML file"},
		{[]string{"status", "--json"}, ""},
		{[]string{"check", "reach", "hub", "--json"}, ""},
		{[]string{"check"}, ""},
		{[]string{"completion", "bash"}, ""},
		{[]string{"--version", "--json"}, ""},
	} {
		err := jsonRefused(newRoot(&globals{}), c.args) // a root a process parses once
		if c.says == "" && err != nil || c.says != "" && (err == nil || !strings.Contains(err.Error(), c.says)) {
			t.Errorf("meshd %s: %v, want %q", strings.Join(c.args, " "), err, c.says)
		}
	}
}

// monitor --json: each log line one JSON object, slog's keys parsed; notices to stderr; a line
// split across writes is one object.
func TestMonitorLogJSON(t *testing.T) {
	var out, notes bytes.Buffer
	l := &logJSON{out: &out, notes: &notes}
	stream := "# monitoring node hub's log at level INFO and above\n" +
		`time=2026-12-03T17:00:00.000Z level=INFO msg="declaration changed" node=hub modules="[webapp notes]"` + "\n" +
		"not a slog line\n"
	for _, part := range []string{stream[:70], stream[70:130], stream[130:]} {
		if _, err := l.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	if notes.String() != "# monitoring node hub's log at level INFO and above\n" {
		t.Errorf("notes: %q", notes.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 JSON lines, got %q", out.String())
	}
	var first, second struct {
		Line, Time, Level, Msg string
		Attrs                  map[string]string
	}
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if first.Msg != "declaration changed" || first.Level != "INFO" || first.Time == "" ||
		first.Attrs["node"] != "hub" || first.Attrs["modules"] != "[webapp notes]" || !strings.HasPrefix(first.Line, "time=") {
		t.Errorf("parsed: %+v", first)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil || second.Line != "not a slog line" || second.Msg != "" {
		t.Errorf("a line slog did not write: %+v %v", second, err)
	}
}
