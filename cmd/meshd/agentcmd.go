package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"meshd/agent"
	"meshd/setup"
)

// agentCmd is `meshd agent`: one cobra declaration, kept whole so its flags, the config file
// keys they mirror and their help read together.
func agentCmd(g *globals) *cobra.Command {
	var (
		configFile string
		cpuProfile string
		cfg        agent.Config
	)
	cmd := &cobra.Command{
		Use:   "agent [--config FILE] [--data-dir DIR] [--socket PATH]",
		Short: "Run this machine's node",
		Long: `The agent runs the node kept in the data dir: on a server, Raft and the controller; on every node,
the operator's socket and the watch on the node's own declaration. SIGTERM or SIGINT stops it cleanly
(a server shuts gossip down without leaving it: it is coming back); everything is kept on disk for
the next start. SIGHUP reads the config file again and applies its log level.

Under systemd (packaging/meshd.service, or ` + "`meshd install-unit`" + `) the unit is Type=notify: the agent
sends READY=1 once its record has replayed the Raft log, so ` + "`systemctl start meshd`" + ` returns when
meshd commands are answered.

--config names a YAML file with any of: data_dir, socket, reconcile_interval (e.g. 10s), log_level
(debug, info, warn, error), docker_host (the Docker engine the node's containers run on), seal_key,
socket_group (a group whose members may use the operator socket besides root), metrics (addresses
to serve Prometheus metrics and the status page on), metrics_underlay. Flags given on the command
line win over the file. packaging/meshd.yaml documents every key; ` + "`meshd config validate FILE`" + ` checks
a file, naming each problem's line and key.

Prometheus metrics are at /metrics on the operator socket, and on each --metrics HOST:PORT given
(plain HTTP): a loopback address, or one in the private network's range (served once the node's
declaration names the range and the address is on the machine). An underlay address is refused
unless --metrics-underlay says so. On a server that listener also serves the status page at / (first
the board, where each node stands and what is in the way, beside the history; then every node, what
it holds and what changed, its openings, the tunnel, what a converge would close; live in the
browser): open http://HOST:PORT/ there, e.g. through ssh -L from your desk.

The operator socket is root's alone (0600, in /run/meshd made 0700), or with --socket-group GROUP also
that group's (0660, the directory 0750 and the group's); each caller's credentials are checked again
on every connection. Something at the socket path that is not a
socket is never removed: the agent refuses to start, naming it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configFile != "" {
				fileCfg, set, err := agent.LoadConfigFile(configFile)
				if err != nil {
					return err
				}
				applyFileConfig(cmd, g, &cfg, fileCfg, set)
			}
			cfg.Socket = g.socket
			level := new(slog.LevelVar)
			if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
				return fmt.Errorf("log level %q: use debug, info, warn or error", cfg.LogLevel)
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			installBootUnit(cfg.DataDir, log)
			a, err := agent.Start(cfg, log)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			if cpuProfile != "" {
				pf, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("--cpu-profile: %w", err)
				}
				defer pf.Close()
				if err := pprof.StartCPUProfile(pf); err != nil {
					return fmt.Errorf("--cpu-profile %s: %w", cpuProfile, err)
				}
				defer pprof.StopCPUProfile()
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			go func() {
				for {
					select {
					case <-ctx.Done():
						return
					case <-hup:
						reloadConfig(cmd, log, configFile, cfg, level)
					}
				}
			}()
			return a.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "a YAML config file")
	f.StringVar(&cpuProfile, "cpu-profile", "", "write a Go CPU profile of this run to FILE, complete once the agent stops (go tool pprof FILE; docs/performance.md)")
	f.StringVar(&cfg.DataDir, "data-dir", agent.DefaultDataDir, "the node's data dir")
	f.DurationVar(&cfg.ReconcileInterval, "reconcile-interval", 10*time.Second, "how often the host re-checks the whole machine without a new declaration; drift in declared files and containers is seen at once by watches, this is their safety net")
	f.StringVar(&cfg.LogLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&cfg.SealKey, "seal-key", "", "the seal key file the node's secrets are sealed under (default $MESHD_SEAL_KEY, else /etc/meshd/seal.key)")
	f.StringVar(&cfg.SocketGroup, "socket-group", "", "a group (name or gid) whose members may use the operator socket besides root (default: root only)")
	f.StringVar(&cfg.DockerHost, "docker-host", "", "the Docker engine's address: a unix socket path or unix://, tcp:// URL (default unix:///var/run/docker.sock)")
	f.StringSliceVar(&cfg.Metrics, "metrics", nil, "serve Prometheus metrics at HOST:PORT/metrics, and on a server the status page at HOST:PORT/ (loopback or the private network; repeat for more)")
	f.BoolVar(&cfg.MetricsUnderlay, "metrics-underlay", false, "allow a --metrics address off loopback and the private network")
	return cmd
}

// installBootUnit writes and enables the meshd-boot unit when systemd runs this agent (it sets
// INVOCATION_ID for every service it starts): the machine's agent, as opposed to one a test or an
// operator runs by hand. A failure is logged; the agent runs all the same.
func installBootUnit(dataDir string, log *slog.Logger) {
	if os.Getenv("INVOCATION_ID") == "" {
		return
	}
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err == nil {
		dataDir, err = filepath.Abs(dataDir)
	}
	var wrote bool
	if err == nil {
		wrote, err = setup.InstallBootUnit("/", exe, dataDir)
	}
	switch {
	case err != nil:
		log.Warn("the boot unit that loads meshd's table before the container engine is not installed", "unit", setup.BootUnitName, "err", err)
	case wrote:
		log.Info("installed and enabled the boot unit that loads meshd's table before the container engine", "unit", setup.BootUnitName)
	}
}
