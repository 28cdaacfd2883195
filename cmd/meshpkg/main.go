// Command meshpkg builds meshd's Debian package (packaging/deb): `meshpkg version` prints the
// version the tree builds as (what `make build` stamps into meshd); `meshpkg build --out bin`
// builds the static, stripped meshd it ships and writes bin/meshd_VERSION_amd64.deb; `meshpkg
// commit COMMIT --cache DIR` prints the package of an older commit, built once by that commit's
// own meshpkg and kept under DIR (deb.BuiltCommit: what the upgrade checks install first).
package main

import (
	"flag"
	"fmt"
	"os"

	"meshd/packaging/deb"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: meshpkg version | meshpkg build [--out bin] [--repo .] | meshpkg commit COMMIT [--cache DIR]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("meshpkg "+os.Args[1], flag.ExitOnError)
	repo := fs.String("repo", ".", "the repository's root (its git history gives the version)")
	out := fs.String("out", "bin", "where to write the package (and, under deb/, the binary it ships)")
	cache := fs.String("cache", "/var/cache/meshd-lab", "where older commits' packages are kept, one dir each")
	args := os.Args[2:]
	commit := ""
	if os.Args[1] == "commit" && len(args) > 0 {
		commit, args = args[0], args[1:]
	}
	_ = fs.Parse(args)
	switch os.Args[1] {
	case "version":
		v, _, err := deb.GitVersion(*repo)
		if err != nil {
			fail(err)
		}
		fmt.Println(v)
	case "build":
		path, _, err := deb.BuildIn(*repo, *out)
		if err != nil {
			fail(err)
		}
		fmt.Println(path)
	case "commit":
		if commit == "" {
			fail(fmt.Errorf("commit: which commit? (meshpkg commit ae14058)"))
		}
		path, err := deb.BuiltCommit(*repo, commit, *cache)
		if err != nil {
			fail(err)
		}
		fmt.Println(path)
	default:
		fmt.Fprintf(os.Stderr, "meshpkg: unknown command %q (want version, build or commit)\n", os.Args[1])
		os.Exit(2)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "meshpkg: %v\n", err)
	os.Exit(1)
}
