package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

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

// jsonVerbatim are the parts of a command's JSON that carry another program's document as that
// program wrote it, nulls and all, by command path: noNull does not look inside them.
var jsonVerbatim = map[string][]string{
	// the container engine's inspect documents, as found and as replaced
	"node original": {".original", ".replaced"},
}

// noNull fails t when the JSON document out (args' answer) holds a null anywhere outside what
// jsonVerbatim names: an empty collection prints [] or {}, and a value that is absent is left
// out (jsonempty.go). The walk, jsonOf and the streams pass each answer they parse through it.
func noNull(t testing.TB, args []string, out string) {
	t.Helper()
	verbatim := jsonVerbatim[jsonPath(args)]
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var v any
		if dec.Decode(&v) != nil {
			return // the caller says it is not JSON
		}
		paths := slices.DeleteFunc(nullPaths(v, ""), func(p string) bool {
			return slices.ContainsFunc(verbatim, func(part string) bool {
				return p == part || strings.HasPrefix(p, part+".") || strings.HasPrefix(p, part+"[")
			})
		})
		if len(paths) > 0 {
			t.Errorf("meshd %s --json: null at %s (an empty collection is [] or {}, an absent value left out)",
				strings.Join(slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == "--json" }), " "), strings.Join(paths, ", "))
		}
	}
}

// nullPaths is where in v (a decoded document) a null is, as jq paths.
func nullPaths(v any, at string) []string {
	var paths []string
	switch x := v.(type) {
	case nil:
		return []string{cmp.Or(at, ".")}
	case map[string]any:
		for k, e := range x {
			paths = append(paths, nullPaths(e, at+"."+k)...)
		}
	case []any:
		for i, e := range x {
			paths = append(paths, nullPaths(e, fmt.Sprintf("%s[%d]", at, i))...)
		}
	}
	sort.Strings(paths)
	return paths
}
