package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/spf13/cobra"
)

// Issue 36: every command's --json is run and parsed by some test. The walk
// (TestProcessEveryJSONParses) runs what one agent can; the tests that build what a command needs
// (a group of three, a stopped node, a credential) run theirs with --json through jsonOf. Each
// records the command it parsed here, and after the package's run the tree is checked against it.

// jsonChecked holds each command path whose --json a test ran and parsed.
var jsonChecked sync.Map

// jsonWalkDone is set once the walk ran to its end (not skipped for want of root).
var jsonWalkDone atomic.Bool

// jsonElsewhere are the commands with --json no test of this package can run, and where they are.
var jsonElsewhere = map[string]string{
	"help":        "cobra's help prints help, --json or not",
	"agent":       "its stdout is its log, not an answer; the process tests run agents throughout",
	"tunnel take": "needs a found WireGuard tunnel: e2e's TestTunnelTakeOnARunningMesh runs it with --json",
	"check reach": "needs a second node on a network: e2e's TestEnrolAndGossip runs it with --json",
}

// markJSON records that a test ran the command args name with --json and parsed its stdout.
func markJSON(args []string) {
	jsonChecked.Store(jsonPath(args), true)
}

// jsonPath is the path after "meshd" of the command args run, global flags left out.
func jsonPath(args []string) string {
	c := newRoot(&globals{})
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--credential" || a == "--socket" {
			i++
			continue
		}
		if strings.HasPrefix(a, "-") {
			continue
		}
		var next *cobra.Command
		for _, s := range c.Commands() {
			if s.Name() == a || s.HasAlias(a) {
				next = s
			}
		}
		if next == nil {
			break
		}
		c = next
	}
	return strings.TrimPrefix(strings.TrimPrefix(c.CommandPath(), "meshd"), " ")
}

// jsonUnchecked names each command that takes --json and that no test ran with it, once the
// whole package ran; it says nothing when the run was filtered or the walk did not run.
func jsonUnchecked() []string {
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		return nil
	}
	if f := flag.Lookup("test.skip"); f != nil && f.Value.String() != "" {
		return nil
	}
	if !jsonWalkDone.Load() {
		return nil
	}
	var missing []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			p := strings.TrimPrefix(sub.CommandPath(), "meshd ")
			_, checked := jsonChecked.Load(p)
			if sub.Flag("json") != nil && !checked && jsonElsewhere[p] == "" {
				missing = append(missing, p)
			}
			walk(sub)
		}
	}
	root := newRoot(&globals{})
	root.InitDefaultHelpCmd()
	walk(root)
	sort.Strings(missing)
	return missing
}

// failUnchecked turns the package's exit code into a failure when a command's --json went
// unchecked.
func failUnchecked(code int) int {
	missing := jsonUnchecked()
	if code != 0 || len(missing) == 0 {
		return code
	}
	fmt.Fprintf(os.Stderr, "FAIL: no test ran these commands with --json and parsed what they printed: meshd %s\n"+
		"(run each through jsonOf in the test that builds what it needs, or name where it is run in jsonElsewhere)\n",
		strings.Join(missing, ", meshd "))
	return 1
}
