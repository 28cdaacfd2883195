// Command meshpkg builds meshd's Debian package (packaging/deb): `meshpkg version` prints the
// version the tree builds as (what `make build` stamps into meshd); `meshpkg build --out bin`
// builds the static, stripped meshd it ships and writes bin/meshd_VERSION_amd64.deb.
package main

import (
	"flag"
	"fmt"
	"os"

	"meshd/packaging/deb"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: meshpkg version | meshpkg build [--out bin] [--repo .]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("meshpkg "+os.Args[1], flag.ExitOnError)
	repo := fs.String("repo", ".", "the repository's root (its git history gives the version)")
	out := fs.String("out", "bin", "where to write the package (and, under deb/, the binary it ships)")
	_ = fs.Parse(os.Args[2:])
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
	default:
		fmt.Fprintf(os.Stderr, "meshpkg: unknown command %q (want version or build)\n", os.Args[1])
		os.Exit(2)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "meshpkg: %v\n", err)
	os.Exit(1)
}
