package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"meshd/agent"
	"meshd/packaging"
)

// applyFileConfig fills cfg from the config file's keys that no flag (nor MESHD_SOCKET) set.
func applyFileConfig(cmd *cobra.Command, g *globals, cfg *agent.Config, file agent.Config, set map[string]bool) {
	flag := func(name string) bool { return cmd.Flags().Changed(name) }
	if set["data_dir"] && !flag("data-dir") {
		cfg.DataDir = file.DataDir
	}
	if set["socket"] && !flag("socket") && os.Getenv("MESHD_SOCKET") == "" {
		g.socket = file.Socket
	}
	if set["reconcile_interval"] && !flag("reconcile-interval") {
		cfg.ReconcileInterval = file.ReconcileInterval
	}
	if set["log_level"] && !flag("log-level") {
		cfg.LogLevel = file.LogLevel
	}
	if set["docker_host"] && !flag("docker-host") {
		cfg.DockerHost = file.DockerHost
	}
	if set["seal_key"] && !flag("seal-key") {
		cfg.SealKey = file.SealKey
	}
	if set["socket_group"] && !flag("socket-group") {
		cfg.SocketGroup = file.SocketGroup
	}
	if set["metrics"] && !flag("metrics") {
		cfg.Metrics = file.Metrics
	}
	if set["metrics_underlay"] && !flag("metrics-underlay") {
		cfg.MetricsUnderlay = file.MetricsUnderlay
	}
}

// reloadConfig is SIGHUP: the config file read again, its log level applied at once (unless
// --log-level was given), and each other key that changed named as waiting for the next start. A
// file with an error changes nothing. systemd is told RELOADING=1, then READY=1.
func reloadConfig(cmd *cobra.Command, log *slog.Logger, file string, running agent.Config, level *slog.LevelVar) {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	_ = agent.SdNotify("RELOADING=1", fmt.Sprintf("MONOTONIC_USEC=%d", ts.Nano()/1000))
	defer func() { _ = agent.SdNotify("READY=1") }()
	if file == "" {
		log.Warn("SIGHUP: the agent runs without --config; nothing to reload")
		return
	}
	fresh := running
	fileCfg, set, err := agent.LoadConfigFile(file)
	if err != nil {
		log.Error("SIGHUP: config not reloaded; the agent goes on as it was", "config", file, "err", err)
		return
	}
	g := &globals{socket: running.Socket}
	applyFileConfig(cmd, g, &fresh, fileCfg, set)
	fresh.Socket = g.socket
	if !set["log_level"] && !cmd.Flags().Changed("log-level") {
		fresh.LogLevel = "info"
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(fresh.LogLevel)); err == nil && l != level.Level() {
		level.Set(l)
		log.Info("SIGHUP: log level changed", "config", file, "log_level", l.String())
	}
	var later []string
	for key, changed := range map[string]bool{
		"data_dir": fresh.DataDir != running.DataDir, "socket": fresh.Socket != running.Socket,
		"reconcile_interval": fresh.ReconcileInterval != running.ReconcileInterval, "docker_host": fresh.DockerHost != running.DockerHost,
		"seal_key": fresh.SealKey != running.SealKey, "socket_group": fresh.SocketGroup != running.SocketGroup,
		"metrics": strings.Join(fresh.Metrics, ",") != strings.Join(running.Metrics, ","), "metrics_underlay": fresh.MetricsUnderlay != running.MetricsUnderlay,
	} {
		if changed {
			later = append(later, key)
		}
	}
	if len(later) > 0 {
		log.Warn("SIGHUP: these keys changed and apply at the agent's next start", "config", file, "keys", strings.Join(sortedStrings(later), ","))
	}
	log.Info("SIGHUP: config reloaded", "config", file)
}

func sortedStrings(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// configCmd is `meshd config validate FILE` and `meshd config example`.
func configCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Check or print the agent's config file"}
	cmd.AddCommand(&cobra.Command{
		Use:   "validate FILE",
		Short: "Check an agent config file: every problem named by file, line and key",
		Long: `Reads FILE as ` + "`meshd agent --config FILE`" + ` would and says what is wrong with it: an unknown key,
a value of the wrong type, a relative path, a log level or metrics address meshd does not take. Each
problem is one line, FILE:LINE: KEY: what is wrong. Exit 0 when the file is fine, 1 otherwise.
With --json: {"file", "valid", "keys" (the keys it sets), "errors" [{file, line, key, message}]}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			_, set, err := agent.LoadConfigFile(args[0])
			type problem struct {
				File    string `json:"file"`
				Line    int    `json:"line"`
				Key     string `json:"key,omitempty"`
				Message string `json:"message"`
			}
			v := struct {
				File   string    `json:"file"`
				Valid  bool      `json:"valid"`
				Keys   []string  `json:"keys"`
				Errors []problem `json:"errors"`
			}{File: args[0], Valid: err == nil, Keys: []string{}, Errors: []problem{}}
			for _, k := range agent.ConfigKeys() {
				if set[k] {
					v.Keys = append(v.Keys, k)
				}
			}
			if errs, ok := err.(agent.ConfigErrors); ok {
				for _, e := range errs {
					v.Errors = append(v.Errors, problem{e.File, e.Line, e.Key, e.Msg})
				}
			} else if ce, ok := err.(*agent.ConfigError); ok {
				v.Errors = append(v.Errors, problem{ce.File, ce.Line, ce.Key, ce.Msg})
			} else if err != nil {
				v.Errors = append(v.Errors, problem{File: args[0], Message: err.Error()})
			}
			if g.json {
				if err := g.emit(v, nil); err != nil {
					return err
				}
				if !v.Valid {
					return exitStatus{1}
				}
				return nil
			}
			if err != nil {
				return err
			}
			sets := "no key: every default"
			if len(v.Keys) > 0 {
				sets = "sets " + strings.Join(v.Keys, ", ")
			}
			fmt.Printf("%s: valid (%s)\n", args[0], sets)
			return nil
		},
	})
	cmd.AddCommand(noJSON(&cobra.Command{
		Use:   "example",
		Short: "Print the agent's config file with every key documented (packaging/meshd.yaml)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Print(packaging.Config)
			return nil
		},
	}, "a YAML file"))
	return cmd
}

// installUnitCmd is `meshd install-unit`.
func installUnitCmd() *cobra.Command {
	var unitPath, configPath, binary string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "install-unit [--unit /etc/systemd/system/meshd.service] [--config /etc/meshd/meshd.yaml] [--dry-run]",
		Short: "Install the systemd unit for meshd agent (Type=notify) and its config file",
		Long: `Writes the systemd unit that runs ` + "`meshd agent --config FILE`" + ` (packaging/meshd.service: Type=notify,
ready once the record has replayed; systemctl reload sends SIGHUP; only the agent is stopped, so the
embedded WireGuard device's own process and the private network outlive a restart), and the config
file with every key documented when none is there yet (an existing config is never overwritten).
Then: systemctl daemon-reload && systemctl enable --now meshd. --dry-run prints the unit instead.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if binary == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("where is meshd? %w (give --binary)", err)
				}
				binary = exe
			}
			unit := packaging.UnitFor(binary, configPath)
			if dryRun {
				fmt.Print(unit)
				return nil
			}
			if err := os.MkdirAll(filepath.Dir(unitPath), 0o755); err != nil {
				return fmt.Errorf("unit %s: %w", unitPath, err)
			}
			if err := os.WriteFile(unitPath, []byte(unit), 0o644); err != nil {
				return fmt.Errorf("unit %s: %w", unitPath, err)
			}
			fmt.Printf("wrote %s (runs %s agent --config %s)\n", unitPath, binary, configPath)
			if _, err := os.Stat(configPath); err == nil {
				if _, _, err := agent.LoadConfigFile(configPath); err != nil {
					return fmt.Errorf("the unit is written, but its config file has problems (fix them before starting):\n%w", err)
				}
				fmt.Printf("kept %s (it is there already, and valid)\n", configPath)
			} else {
				if err := os.MkdirAll(filepath.Dir(configPath), 0o755); err != nil {
					return fmt.Errorf("config %s: %w", configPath, err)
				}
				if err := os.WriteFile(configPath, []byte(packaging.Config), 0o644); err != nil {
					return fmt.Errorf("config %s: %w", configPath, err)
				}
				fmt.Printf("wrote %s (every key documented; edit it, then meshd config validate %s)\n", configPath, configPath)
			}
			fmt.Println("next: systemctl daemon-reload && systemctl enable --now meshd")
			return nil
		},
	}
	noJSON(cmd, "a unit file (--dry-run) or what it wrote")
	f := cmd.Flags()
	f.StringVar(&unitPath, "unit", "/etc/systemd/system/meshd.service", "where to write the unit")
	f.StringVar(&configPath, "config", "/etc/meshd/meshd.yaml", "the config file the unit runs the agent with")
	f.StringVar(&binary, "binary", "", "the meshd binary the unit runs (default: this one)")
	f.BoolVar(&dryRun, "dry-run", false, "print the unit and write nothing")
	return cmd
}
