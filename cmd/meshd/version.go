package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// commit is the commit meshd was built from when the build did not stamp it (a build from a git
// worktree, or with -buildvcs=false): `make build` sets it with -ldflags "-X main.commit=…".
var commit string

// VersionView is what `meshd version` prints.
type VersionView struct {
	Module string `json:"module"`
	// Version is the Debian version of the build (from the tag or the commit), "" when unstamped.
	Version string `json:"version,omitempty"`
	// Commit is the git revision built, "" when unknown; Modified says the tree had changes.
	Commit    string `json:"commit"`
	Modified  bool   `json:"modified,omitempty"`
	CommitAt  string `json:"commit_time,omitempty"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

func buildVersion() VersionView {
	v := VersionView{Module: "meshd", Version: version, Commit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.GoVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.time":
				v.CommitAt = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	return v
}

func (v VersionView) text(w io.Writer) {
	c := v.Commit
	switch {
	case c == "":
		c = "commit unknown (built without VCS stamping; `make build` records it)"
	case v.Modified:
		c += " (with uncommitted changes)"
	}
	if v.Version != "" {
		c = v.Version + " (commit " + c + ")"
	}
	fmt.Fprintf(w, "meshd %s\n%s, %s\n", c, v.GoVersion, v.Platform)
}

func versionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the commit meshd was built from and its Go version (also meshd --version)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := buildVersion()
			return g.emit(v, v.text)
		},
	}
}
