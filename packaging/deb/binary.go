package deb

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildBinary builds the meshd the package ships into out (a file path) from the repository at
// repo: static (CGO_ENABLED=0), stripped (-s -w: Debian ships stripped binaries; Go's stack
// traces do not need the symbol table), stamped as `make build` stamps bin/meshd (main.commit,
// with -modified for a tree with changes) and with main.version = version.
func BuildBinary(repo, out, version string) error {
	rev, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD").Output()
	if err != nil {
		return fmt.Errorf("git rev-parse HEAD: %w", err)
	}
	commit := strings.TrimSpace(string(rev))
	if exec.Command("git", "-C", repo, "diff", "--quiet", "HEAD").Run() != nil {
		commit += "-modified"
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-trimpath",
		"-ldflags", "-s -w -X main.commit="+commit+" -X main.version="+version,
		"-o", abs, "./cmd/meshd")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/meshd: %w: %s", err, b)
	}
	return nil
}
