package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// groupCommands sorts the top-level commands of `meshd --help` by what the operator does with
// them: the migration's steps, looking, and running meshd itself.
func groupCommands(root *cobra.Command) {
	root.AddGroup(
		&cobra.Group{ID: "migrate", Title: "The migration, step by step:"},
		&cobra.Group{ID: "look", Title: "Looking at the mesh:"},
		&cobra.Group{ID: "run", Title: "Running meshd itself:"},
	)
	groups := map[string]string{
		"genesis": "migrate", "token": "migrate", "join": "migrate", "tunnel": "migrate", "module": "migrate",
		"converge": "migrate", "adopt": "migrate", "node": "migrate",
		"status": "look", "members": "look", "monitor": "look", "declaration": "look", "check": "look", "history": "look",
	}
	for _, c := range root.Commands() {
		if g, ok := groups[c.Name()]; ok {
			c.GroupID = g
		} else {
			c.GroupID = "run"
		}
	}
	root.SetHelpCommandGroupID("run")
}

// completionCmd is `meshd completion bash|zsh|fish`.
func completionCmd(root *cobra.Command) *cobra.Command {
	return noJSON(&cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print a shell completion script for meshd (bash, zsh or fish)",
		Long: `Prints the script that completes meshd's commands and flags in your shell. Load it once in the
running shell, or install it for every new one (bash's needs Debian's bash-completion package):

  bash:  source <(meshd completion bash)
         meshd completion bash > /etc/bash_completion.d/meshd
  zsh:   source <(meshd completion zsh)
         meshd completion zsh > "${fpath[1]}/_meshd"     (with compinit in ~/.zshrc)
  fish:  meshd completion fish | source
         meshd completion fish > ~/.config/fish/completions/meshd.fish`,
		ValidArgs: []string{"bash", "zsh", "fish"},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("which shell? %s takes one of bash, zsh, fish", cmd.CommandPath())
			}
			if args[0] != "bash" && args[0] != "zsh" && args[0] != "fish" {
				return fmt.Errorf("%s: no completion for %q; give bash, zsh or fish", cmd.CommandPath(), args[0])
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(os.Stdout, true)
			case "zsh":
				return root.GenZshCompletion(os.Stdout)
			default:
				return root.GenFishCompletion(os.Stdout, true)
			}
		},
	}, "a shell script")
}
