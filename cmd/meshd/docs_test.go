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

// docs/cli.md is what the command tree and guide.md make of it now: a flag, a command, a help text
// or the guide changed without regenerating it fails here.
func TestCLIReferenceIsCurrent(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := cliDoc(guideText)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
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
			t.Fatalf("docs/cli.md is stale (regenerate it: go generate ./cmd/meshd, or meshd docs cli --update docs/cli.md; edit cmd/meshd/guide.md or the commands' help, not docs/cli.md); first difference at its line %d:\n  docs/cli.md: %q\n  generated:   %q", i+1, g, w)
		}
	}
}

// The guide speaks only of commands the tree has: a section for a command renamed or removed, or a
// heading the generator does not own, fails the generation naming guide.md's line. A command's two
// sections are joined, and each section lands in its command's part of the document.
func TestGuideNamesOnlyCommands(t *testing.T) {
	root := newRoot(&globals{})
	for text, want := range map[string]string{
		"pre\n## meshd genesis\nok\n## meshd nope\nx\n": "guide.md:4: section \"meshd nope\" names no command",
		"pre\n### meshd genesis\n":                      "guide.md:2: \"### meshd genesis\": only `## meshd COMMAND` headings",
		"pre\n## meshd\n":                               "guide.md:2: section \"meshd\" names no command",
		"pre\n```\n# a comment in a block\n":            "a code block is not closed",
	} {
		if _, err := parseGuide(text, root); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseGuide(%q): %v; want an error saying %q", text, err, want)
		}
	}
	g, err := parseGuide("the preamble\n\n## meshd node show\nfirst\n```\n# not a heading\n```\n## meshd genesis\ng\n## meshd node show\nsecond\n", root)
	if err != nil {
		t.Fatal(err)
	}
	if g.preamble != "the preamble" || strings.Join(g.order, ",") != "meshd node show,meshd genesis" ||
		g.sections["meshd node show"] != "first\n```\n# not a heading\n```\nsecond" {
		t.Fatalf("parsed: %+v", g)
	}
	doc, err := cliDoc(guideText)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"meshd genesis", "meshd module take", "meshd tunnel take"} {
		i := strings.Index(doc, "\n## "+c+"\n")
		if i < 0 || !strings.Contains(doc[i:], "`"+c+" --help`:") {
			t.Errorf("docs/cli.md has no section for %s with its help", c)
		}
	}
}
