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
