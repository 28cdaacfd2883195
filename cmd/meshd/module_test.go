package main

import (
	"strings"
	"testing"

	"meshd/api"
	"meshd/catalogue"
)

// Issue 26, finding 6: a module that says privileged: true is named so, with what makes it root,
// wherever the operator meets it (show, add, assign, the take preview); any other says nothing.
func TestPrivilegedLinesNameWhatMakesAModuleRoot(t *testing.T) {
	m, err := catalogue.Parse("ops.yaml", []byte("name: ops\nprivileged: true\nfiles:\n  - {path: /etc/sudoers.d/ops, content: \"ops ALL=(ALL) ALL\\n\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	lines := privilegedLines(m, nil)
	if len(lines) != 2 || !strings.Contains(lines[0], "root on every machine") || !strings.Contains(lines[1], "/etc/sudoers.d/ops (sudo reads it)") {
		t.Fatalf("privileged lines: %q", lines)
	}
	// Issue 34, finding 1: as the server says it, with who said so, or UNCONFIRMED and how to.
	said := &api.ModulePrivilege{Module: "ops", By: "operator alice", Reaches: []string{"file /etc/sudoers.d/ops (sudo reads it)"}}
	if lines := privilegedLines(m, said); len(lines) != 2 || !strings.Contains(lines[0], "said so by operator alice") {
		t.Fatalf("privileged lines of a said module: %q", lines)
	}
	said.By, said.Unconfirmed = "", true
	if lines := privilegedLines(m, said); len(lines) != 2 || !strings.Contains(lines[0], "UNCONFIRMED") || !strings.Contains(lines[0], "meshd module confirm ops") {
		t.Fatalf("privileged lines of an unconfirmed module: %q", lines)
	}
	plain, err := catalogue.Parse("app.yaml", []byte("name: app\nfiles:\n  - {path: /etc/app/app.conf, content: x}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := privilegedLines(plain, nil); got != nil {
		t.Fatalf("an ordinary module: %q", got)
	}
}
