package ufw

import (
	"bytes"
	"context"
	"strings"

	"meshd/netfilter"
	"meshd/netfilter/xt"
)

// Where ufw keeps its configuration: the directory, whether it is enabled, and its rules.
const (
	ConfigDir = "/etc/ufw"
	Conf      = "/etc/ufw/ufw.conf"
	UserRules = "/etc/ufw/user.rules"
	User6     = "/etc/ufw/user6.rules"
)

// Detect finds ufw: its chains loaded in a backend, or enabled in its config. dumps are the
// IPv4 filter tables xt.Read found, one a backend. ok is false when there is none.
func Detect(ctx context.Context, env netfilter.Env, dumps []*xt.Dump) (f netfilter.Found, ok bool, err error) {
	conf, _, err := env.ReadFile(ctx, Conf)
	if err != nil {
		return netfilter.Found{}, false, err
	}
	enabled := bytes.Contains(conf, []byte("\nENABLED=yes")) || bytes.HasPrefix(conf, []byte("ENABLED=yes"))
	for _, d := range dumps {
		if d.Has("ufw-user-input") || (enabled && d.Backend == "nft" && len(dumps) == 1) {
			f := netfilter.Found{Kind: netfilter.KindUFW, Backend: d.Backend, Active: enabled && d.Has("ufw-user-input"), Config: ConfigDir, DockerUser: d.Has("DOCKER-USER")}
			if err := count(ctx, env, &f); err != nil {
				return netfilter.Found{}, false, err
			}
			return f, true, nil
		}
	}
	if enabled {
		return netfilter.Found{Kind: netfilter.KindUFW, Backend: "nft", Config: ConfigDir}, true, nil
	}
	return netfilter.Found{}, false, nil
}

// count counts ufw's own rules on each path into f, meshd's marked rules left out.
func count(ctx context.Context, env netfilter.Env, f *netfilter.Found) error {
	ts, err := readTuples(ctx, env)
	if err != nil {
		return err
	}
	for _, t := range ts {
		if strings.HasPrefix(t.Comment, netfilter.MarkPrefix) {
			continue
		}
		if t.Route {
			f.Forwarded++
		} else {
			f.Incoming++
		}
	}
	return nil
}
