package agent

// The agent's config file: YAML whose keys are Config's yaml tags. LoadConfigFile reads it
// strictly: an unknown key, a value of the wrong type or one out of range is an error naming the
// file, the line and the key, so `meshd config validate FILE` and the agent's start (and SIGHUP)
// say the same thing about the same file.

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ConfigKeys are the config file's keys, in Config's order.
func ConfigKeys() []string {
	var keys []string
	t := reflect.TypeOf(Config{})
	for i := 0; i < t.NumField(); i++ {
		if k := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]; k != "" && k != "-" {
			keys = append(keys, k)
		}
	}
	return keys
}

// ConfigError is one thing wrong in a config file, at a line.
type ConfigError struct {
	File string
	Line int
	Key  string
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Key, e.Msg)
}

// ConfigErrors are every problem a file has, in line order.
type ConfigErrors []*ConfigError

func (es ConfigErrors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// LoadConfigFile reads an agent config file, naming each problem's line and key. Keys the file
// sets are returned in set (so that flags given on the command line can win over them).
func LoadConfigFile(path string) (cfg Config, set map[string]bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, nil, fmt.Errorf("config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return cfg, nil, fmt.Errorf("config %s: %w", path, err)
	}
	set = map[string]bool{}
	if len(doc.Content) == 0 {
		return cfg, set, nil // an empty file: every default
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return cfg, nil, &ConfigError{File: path, Line: root.Line, Msg: "the config is a mapping of keys (data_dir: /var/lib/meshd, ...)"}
	}
	known := ConfigKeys()
	fields := map[string]int{}
	t := reflect.TypeOf(cfg)
	for i := 0; i < t.NumField(); i++ {
		fields[strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]] = i
	}
	var errs ConfigErrors
	v := reflect.ValueOf(&cfg).Elem()
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, val := root.Content[i], root.Content[i+1]
		idx, ok := fields[k.Value]
		if !ok || k.Value == "-" {
			errs = append(errs, &ConfigError{File: path, Line: k.Line, Key: k.Value, Msg: "unknown key (known: " + strings.Join(known, ", ") + ")"})
			continue
		}
		if set[k.Value] {
			errs = append(errs, &ConfigError{File: path, Line: k.Line, Key: k.Value, Msg: "given twice"})
			continue
		}
		set[k.Value] = true
		if err := val.Decode(v.Field(idx).Addr().Interface()); err != nil {
			errs = append(errs, &ConfigError{File: path, Line: val.Line, Key: k.Value, Msg: "want " + configWant(k.Value) + ": " + yamlReason(err)})
			continue
		}
		if msg := checkConfigValue(k.Value, &cfg); msg != "" {
			errs = append(errs, &ConfigError{File: path, Line: val.Line, Key: k.Value, Msg: msg})
		}
	}
	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
		return cfg, nil, errs
	}
	return cfg, set, nil
}

// configWant says what a key's value looks like.
func configWant(key string) string {
	switch key {
	case "reconcile_interval":
		return "a duration such as 10s"
	case "metrics":
		return "a list of HOST:PORT"
	case "metrics_underlay":
		return "true or false"
	}
	return "a string"
}

// yamlReason is yaml's complaint without its "yaml: unmarshal errors:\n  line N:" frame.
func yamlReason(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && strings.Contains(s, "line ") {
		return strings.TrimSpace(s[i+2:])
	}
	return s
}

// checkConfigValue checks one key's decoded value; "" when it is fine.
func checkConfigValue(key string, c *Config) string {
	switch key {
	case "data_dir":
		if !filepath.IsAbs(c.DataDir) {
			return fmt.Sprintf("%q is not an absolute path", c.DataDir)
		}
	case "socket":
		if !filepath.IsAbs(c.Socket) {
			return fmt.Sprintf("%q is not an absolute path", c.Socket)
		}
	case "seal_key":
		if !filepath.IsAbs(c.SealKey) {
			return fmt.Sprintf("%q is not an absolute path", c.SealKey)
		}
	case "reconcile_interval":
		if c.ReconcileInterval < 100*time.Millisecond {
			return fmt.Sprintf("%s is too short (at least 100ms; 10s is the default)", c.ReconcileInterval)
		}
	case "log_level":
		var l slog.Level
		if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
			return fmt.Sprintf("%q: use debug, info, warn or error", c.LogLevel)
		}
	case "docker_host":
		h := c.DockerHost
		if !strings.HasPrefix(h, "/") && !strings.HasPrefix(h, "unix://") && !strings.HasPrefix(h, "tcp://") {
			return fmt.Sprintf("%q: give a unix socket path, unix:///path or tcp://HOST:PORT", h)
		}
	case "metrics":
		for _, addr := range c.Metrics {
			if err := checkMetricsAddr(addr, "", true); err != nil {
				return err.Error()
			}
		}
	}
	return ""
}
