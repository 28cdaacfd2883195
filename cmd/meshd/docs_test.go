package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every command the CLI has is in the CLI reference, and every command has help that says
// something: a newcomer reading docs/cli.md or --help finds each one.
func TestCLIReferenceCoversEveryCommand(t *testing.T) {
	ref, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			if sub.Short == "" {
				t.Errorf("%s has no help text", sub.CommandPath())
			}
			if sub.Runnable() && !strings.Contains(string(ref), sub.CommandPath()) {
				t.Errorf("docs/cli.md does not mention %q", sub.CommandPath())
			}
			walk(sub)
		}
	}
	walk(newRoot(&globals{}))
}

// The generated command reference at the end of docs/cli.md is what the command tree says now: a
// flag, a command or a help text changed without regenerating it fails here.
func TestCLIReferenceIsCurrent(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	got, want := referenceOf(string(b)), cliReference()
	if got == want {
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(gl) || i < len(wl); i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("docs/cli.md's command reference is stale (regenerate it: go generate ./cmd/meshd, or meshd docs cli --update docs/cli.md); first difference at its line %d:\n  docs/cli.md: %q\n  the commands: %q", i+1, g, w)
		}
	}
}

// Regenerating keeps the hand-written part as it is and replaces only the generated one.
func TestWithReferenceKeepsTheGuide(t *testing.T) {
	doc := withReference("# guide\n\nhand-written\n", "old ref\n")
	if referenceOf(doc) != "old ref\n" || !strings.HasPrefix(doc, "# guide\n\nhand-written\n\n") {
		t.Fatalf("first generation: %q", doc)
	}
	doc = withReference(doc+"", "new ref\n")
	if referenceOf(doc) != "new ref\n" || strings.Contains(doc, "old ref") || !strings.HasPrefix(doc, "# guide\n\nhand-written\n") {
		t.Fatalf("regenerated: %q", doc)
	}
}
