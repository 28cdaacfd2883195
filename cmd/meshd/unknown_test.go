package main

import (
	"io"
	"strings"
	"testing"
)

// A mistyped command is an error naming the nearest one, at every level; what cobra runs or
// refuses itself (a group alone, --help, help CMD, completion, a command's own arguments) passes.
func TestUnknownSubcommandIsNamed(t *testing.T) {
	refused := map[string]string{
		"module asign hub webapp": `unknown command "asign" for "meshd module" (did you mean "assign"?)`,
		"--json module asign":     `unknown command "asign" for "meshd module"`,
		"tunel show":              `unknown command "tunel" for "meshd" (did you mean "tunnel"?)`,
		"node shwo hub":           `unknown command "shwo" for "meshd node" (did you mean "show"?)`,
		"operator raft transfer":  `unknown command "transfer" for "meshd operator raft" (did you mean "transfer-leader"?)`,
		"nosuch --help":           `unknown command "nosuch" for "meshd"`,
		"tunel --help":            `unknown command "tunel" for "meshd" (did you mean "tunnel"?)`,
		"module asign -h":         `unknown command "asign" for "meshd module" (did you mean "assign"?)`,
	}
	for line, want := range refused {
		err := unknownSubcommand(newRoot(&globals{out: io.Discard}), strings.Fields(line))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("meshd %s: got %v, want %q", line, err, want)
		}
	}
	for _, line := range []string{"", "module", "module --help", "help module", "module list --json",
		"module --socket /x list", "module take hub webapp --preview", "status", "--version",
		"__complete module a", "converge hub --plan abc", "completion bash"} {
		if err := unknownSubcommand(newRoot(&globals{out: io.Discard}), strings.Fields(line)); err != nil {
			t.Errorf("meshd %s: refused: %v", line, err)
		}
	}
}
