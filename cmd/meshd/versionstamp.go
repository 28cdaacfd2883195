package main

// version is the build's Debian version (packaging/deb.Version of `git describe --tags --always`:
// 1.2.0 on a tag, 0.0~r683.git20261202.abc1234 between tags), stamped by `make build` with
// -ldflags "-X main.version=…"; the package `make package` builds carries the same string.
var version string

// versionString is the stamped version, "" for a build that did not stamp one.
func (v VersionView) versionString() string { return v.Version }
