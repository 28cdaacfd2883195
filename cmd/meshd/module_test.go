package main

import (
	"strings"
	"testing"

	"meshd/catalogue"
)

// Issue 26, finding 6: a module that says privileged: true is named so, with what makes it root,
// wherever the operator meets it (show, add, assign, the take preview); any other says nothing.
func TestPrivilegedLinesNameWhatMakesAModuleRoot(t *testing.T) {
	m, err := catalogue.Parse("ops.yaml", []byte("name: ops\nprivileged: true\nfiles:\n  - {path: /etc/sudoers.d/ops, content: \"ops ALL=(ALL) ALL\\n\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	lines := privilegedLines(m)
	if len(lines) != 2 || !strings.Contains(lines[0], "root on every machine") || !strings.Contains(lines[1], "/etc/sudoers.d/ops (sudo reads it)") {
		t.Fatalf("privileged lines: %q", lines)
	}
	plain, err := catalogue.Parse("app.yaml", []byte("name: app\nfiles:\n  - {path: /etc/app/app.conf, content: x}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := privilegedLines(plain); got != nil {
		t.Fatalf("an ordinary module: %q", got)
	}
}
