package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// unknownSubcommand names a mistyped command: cobra alone prints a group's help and exits 0 for
// `meshd module asign hub webapp`, so a script's typo would pass, and the root's refusal of
// `meshd tunel show` says no nearer name. It returns nil for anything cobra runs or refuses itself
// (flags, --help, a command's own arguments).
func unknownSubcommand(root *cobra.Command, args []string) error {
	if len(args) > 0 && strings.HasPrefix(args[0], "__") {
		return nil // cobra's hidden completion commands, added when it executes
	}
	root.InitDefaultHelpCmd() // `meshd help CMD`, which cobra too adds only when it executes
	c, rest, err := root.Find(args)
	if err != nil || !c.HasSubCommands() || (c != root && c.Runnable()) {
		return nil
	}
	// --help is a flag cobra adds only when it executes: without it here, `meshd history --help`
	// failed to parse, was left to cobra, and printed the root's help with exit 0, as if the
	// command existed.
	c.InitDefaultHelpFlag()
	if err := c.ParseFlags(rest); err != nil {
		return nil // cobra says what is wrong with the flags
	}
	pos := c.Flags().Args()
	if len(pos) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", pos[0], c.CommandPath())
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's own default for the suggestions it makes
	}
	if s := c.SuggestionsFor(pos[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return fmt.Errorf("%s; see `%s --help`", msg, c.CommandPath())
}
