// Command meshd is the one binary of the mesh: `meshd agent` runs a node, and every other
// subcommand is the operator's, talking to the local agent over its unix socket.
//
// --json prints JSON only, on stdout (jsonout.go); every command exits 0 on success and 1 on
// error, with a message that names the thing.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"meshd/api"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

type globals struct {
	socket string
	// credential is an operator credential file: with it the CLI talks to a server's bus.
	credential string
	json       bool
	stale      bool
	out        io.Writer
	// last is the last client made, to say after the command who answered it.
	last *api.Client

	// wide writes tables' lines whole on a terminal too (fit.go).
	wide bool
}

func main() {
	g := &globals{out: os.Stdout}
	root := newRoot(g)
	err := unknownSubcommand(root, os.Args[1:])
	if err == nil {
		err = jsonRefused(root, os.Args[1:])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "meshd: %v\n", err)
		os.Exit(1)
	}
	if err := root.Execute(); err != nil {
		code, quiet := exitCodeOf(err)
		if !quiet {
			fmt.Fprintf(os.Stderr, "meshd: %v\n", err)
		}
		os.Exit(code)
	}
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "meshd",
		Short: "meshd takes a fleet over from a predecessor mesh while it keeps serving",
		Long: `meshd takes a fleet of machines over from a predecessor mesh, machine by machine and module by
module, while the machines keep serving. Every machine runs ` + "`meshd agent`" + `; the control-node leads a
Raft group holding the record (each node's mode, modules assigned and taken, settings, the tunnel).

A node in use is adopted first: what meshd finds on it is held, not replaced, until the operator
takes each module. The operator converges the node when its migration is done.

A migration, in order (the runbook walks it step by step: docs/runbook.md, installed as
/usr/share/doc/meshd/docs/runbook.md):

  1. meshd genesis --name hub --adopted --take-tunnel wg0 --dry-run
                                                     on the control-node: the preflight alone
     meshd genesis --name hub --adopted --take-tunnel wg0
                                                     the record begins; what is found is held, and the
                                                     predecessor's tunnel wg0 is the mesh's, in place
     systemctl enable --now meshd                   the agent, under systemd (the package's unit;
                                                     without the package: meshd install-unit first)
  2. meshd token create --adopted > token            a token for the next machine
  3. meshd join --token-file token --name web1 --tunnel wg0
                                                     on that machine: it enrols, adopted, keeping the
                                                     address its predecessor tunnel wg0 gives it
  4. meshd tunnel take web1 wg0                      its predecessor tunnel, taken over in place
  5. meshd module assign web1 webapp                 prepare: create what is missing, hold what is found
  6. meshd module take web1 webapp                   the cutover, once the module's data has moved
  7. meshd converge web1 --preview                   what would close; then converge web1 --plan TOKEN

Tunnel take, take and converge follow the node until its report says the act is carried out (exit
0) or failed (exit 1, naming the resource and why); --no-wait returns once the record holds it.

Look at any time: meshd status (the board: where each node stands, what is in the way of its next
step), meshd history (what happened when, and who did it), meshd node show NODE, meshd monitor
NODE, and a server's status page, the board and the history live (meshd agent --metrics
127.0.0.1:9470, then http://127.0.0.1:9470/).

The operator's commands talk to the local agent over its socket (` + api.DefaultSocket + `;
--socket or MESHD_SOCKET to change it). The record is read and written on a server's socket, or
from any machine with an operator credential (--credential FILE or MESHD_CREDENTIAL; a server
makes one: ` + "`meshd operator credential create`" + `); a client machine's socket answers its own
status and refuses the record's commands without one.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	// --version is `meshd version`, --json included; without it the bare command shows the help.
	var version bool
	root.Flags().BoolVar(&version, "version", false, "print the commit and Go version meshd was built from")
	root.Args = cobra.NoArgs
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		if version {
			v := buildVersion()
			return g.emit(v, v.text)
		}
		if g.json {
			return errors.New("meshd --json: name a command (`meshd status --json`), or --version --json")
		}
		return cmd.Help()
	}
	def := os.Getenv("MESHD_SOCKET")
	if def == "" {
		def = api.DefaultSocket
	}
	root.PersistentFlags().StringVar(&g.socket, "socket", def, "the agent's operator socket (env MESHD_SOCKET)")
	root.PersistentFlags().StringVar(&g.credential, "credential", os.Getenv(credentialEnv), "an operator credential file: talk to a server's bus with it instead of the local socket (env "+credentialEnv+"; meshd operator credential --help)")
	root.PersistentFlags().BoolVar(&g.json, "json", false, "print JSON for scripts instead of text: one document (monitor: one object a line); messages on stderr")
	root.PersistentFlags().BoolVar(&g.wide, "wide", false, "write tables' lines whole on a terminal too, instead of wrapping their cells to its width")
	root.PersistentFlags().BoolVar(&g.stale, "stale", false, "let a follower server answer a read from its own record (it says how far behind it may be) instead of asking the leader")
	root.PersistentPostRun = func(cmd *cobra.Command, _ []string) {
		// --json: the answer is for a program, which reads the index from it; no extra line
		// that a caller combining the two streams would have to strip.
		if f := cmd.Flags().Lookup("json"); f != nil && f.Value.String() == "true" {
			return
		}
		g.sayAnswered(os.Stderr)
	}
	root.AddCommand(genesisCmd(g), agentCmd(g), statusCmd(g), nodeCmd(g), moduleCmd(g), declarationCmd(g),
		operatorCmd(g), snapshotCmd(g), tokenCmd(g), joinCmd(g), membersCmd(g), leaveCmd(g), keyringCmd(g), checkCmd(g))
	root.AddCommand(convergeCmd(g))
	root.AddCommand(adoptCmd(g))
	root.AddCommand(tunnelCmd(g), tunnelDeviceCmd())
	root.AddCommand(versionCmd(g), monitorCmd(g))
	root.AddCommand(historyCmd(g))
	root.AddCommand(bootCmd(g))
	root.AddCommand(configCmd(g), installUnitCmd(), completionCmd(root), docsCmd())
	groupCommands(root)
	return root
}

// sayAnswered tells on stderr (stdout stays the command's) what the answer said about itself: a
// write's committed index, a stale read's distance from the leader.
func (g *globals) sayAnswered(w io.Writer) {
	if g.last == nil {
		return
	}
	a := g.last.Last()
	switch {
	case a.Write && a.Index != "":
		fmt.Fprintf(w, "committed and applied at record index %s (answered by %s)\n", a.Index, a.ServedBy)
	case a.Stale != "":
		fmt.Fprintf(w, "stale read: answered by %s: %s\n", a.ServedBy, a.Stale)
	}
}

func (g *globals) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 60*time.Second)
}

// emit prints v as JSON with --json (its empty collections [] and {}, jsonempty.go), else calls
// text, its tables fitted to the terminal (fit.go).
func (g *globals) emit(v any, text func(w io.Writer)) error {
	if g.json {
		enc := json.NewEncoder(g.out)
		enc.SetIndent("", "  ")
		return enc.Encode(emptied(v))
	}
	return writeTable(g.out, g.width(), text)
}

func list(xs []string) string {
	if len(xs) == 0 {
		return "-"
	}
	return strings.Join(xs, ", ")
}

// exactArgs is cobra.ExactArgs with a message that says what the arguments are.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return fmt.Errorf("%s takes %d argument(s): %s (got %d); see `%s --help`", cmd.CommandPath(), len(names), strings.Join(names, " "), len(args), cmd.CommandPath())
		}
		return nil
	}
}
