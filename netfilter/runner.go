package netfilter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Runner runs a command (ufw, iptables, nft, cat) where the firewall lives and returns its
// standard output. An error carries the command and its standard error.
type Runner interface {
	Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error)
}

// ExecRunner runs commands with os/exec, each prefixed by Prefix (for example
// nsenter --net=/run/netns/x --mount=/proc/123/ns/mnt --). The zero value runs them in the
// caller's own namespaces.
type ExecRunner struct {
	Prefix []string
}

// NSEnter returns an ExecRunner entering the network namespace at netns and, if mountns is
// not empty, the mount namespace at mountns (so ufw reads its own /etc/ufw there).
func NSEnter(netns, mountns string) ExecRunner {
	p := []string{"nsenter"}
	if netns != "" {
		p = append(p, "--net="+netns)
	}
	if mountns != "" {
		p = append(p, "--mount="+mountns)
	}
	return ExecRunner{Prefix: append(p, "--")}
}

// Run implements Runner.
func (r ExecRunner) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	argv := append(append(append([]string{}, r.Prefix...), name), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// Env says where the firewall is: the network namespace for netlink, the runner for
// commands. The zero value is the machine's own namespaces.
type Env struct {
	// NetNS is the path of a network namespace file (/run/netns/x, /proc/PID/ns/net); empty
	// means the caller's own.
	NetNS string
	// Runner runs commands in the same network namespace (and the mount namespace that holds
	// the firewall's configuration); nil means ExecRunner{}.
	Runner Runner
	// Root is where the firewall's configuration files are seen from this process: "" is the
	// machine's own /; a test running the firewall in another mount namespace sets
	// /proc/PID/root of a process there. ufw's rules are edited in one batch only where meshd
	// sees its files (Root set, or a runner that does not enter another mount namespace).
	Root string
	// StateDir, if set, is where Retire keeps what Restore needs (besides returning it).
	StateDir string
	Log      *slog.Logger
}

// Path is p as this process sees the firewall's file system.
func (e Env) Path(p string) string { return filepath.Join("/", e.Root, p) }

// SeesFiles says whether this process sees the firewall's files at Path(): Root is set, or
// commands run in this process's own mount namespace.
func (e Env) SeesFiles() bool {
	if e.Root != "" || e.Runner == nil {
		return true
	}
	r, ok := e.Runner.(ExecRunner)
	if !ok {
		return false
	}
	for _, a := range r.Prefix {
		if strings.HasPrefix(a, "--mount") {
			return false
		}
	}
	return true
}

// Run runs a command through the runner, with no standard input.
func (e Env) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return e.RunIn(ctx, nil, name, args...)
}

// RunIn runs a command through the runner (ExecRunner{} when none is set), stdin on its input.
func (e Env) RunIn(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	r := e.Runner
	if r == nil {
		r = ExecRunner{}
	}
	return r.Run(ctx, stdin, name, args...)
}

// Logger is Log, or slog's default when it is nil.
func (e Env) Logger() *slog.Logger {
	if e.Log != nil {
		return e.Log
	}
	return slog.Default()
}

// ReadFile reads a file where the firewall lives (through the runner, so a mount namespace
// is honoured). ok is false when it does not exist. A check that could not run (a cancelled
// context, nsenter failing) is an error, never "absent": a caller deciding from an empty
// read would take the found firewall's own rules for missing.
func (e Env) ReadFile(ctx context.Context, path string) (data []byte, ok bool, err error) {
	if _, err := e.Run(ctx, "test", "-e", path); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 1 {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("check %s: %w", path, err)
	}
	b, err := e.Run(ctx, "cat", path)
	if err != nil {
		return nil, true, fmt.Errorf("read %s: %w", path, err)
	}
	return b, true, nil
}
