package deb

import "path/filepath"

// BuildIn builds the binary and the package of the repository at repo into dir (the binary as
// dir/deb/meshd) and returns the package's path and version: what `meshpkg build` does, for
// this package's test and the lab's systemd machines, which install it.
func BuildIn(repo, dir string) (path, version string, err error) {
	v, at, err := GitVersion(repo)
	if err != nil {
		return "", "", err
	}
	bin := filepath.Join(dir, "deb", "meshd")
	if err := BuildBinary(repo, bin, v); err != nil {
		return "", "", err
	}
	path, err = Build(Options{Binary: bin, Repo: repo, Version: v, Date: at, OutDir: dir})
	return path, v, err
}
