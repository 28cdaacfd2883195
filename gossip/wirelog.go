package gossip

import (
	"log/slog"
	"slices"
	"strings"
	"time"

	"meshd/internal/ratelog"
)

// memberlist's own lines go through a rate limit by kind, and those about traffic refused before
// any key let it in are counted (Refused). Anyone who reaches the gossip port can cause one such
// line per datagram or connection, each with its sender's address in it: by text they would all
// differ, by kind they are a few.

// memberlistBurst lines of each kind reach the log per memberlistWindow; the next one let through
// says how many were left out.
const (
	memberlistBurst  = 5
	memberlistWindow = time.Minute
)

// refusedKinds are memberlist's lines about traffic refused before decryption, by the start of
// their text, and the kind each is counted as; the first that matches names it (a stream's label
// line starts like its read line).
var refusedKinds = []struct{ prefix, kind string }{
	{"Decrypt packet failed", "packet_decrypt"},
	{"discarding packet with unacceptable label", "packet_label"},
	{"unexpected double packet label header", "packet_label"},
	{"cannot decode label; packet", "packet_label"},
	{"label header cannot be empty", "packet_label"},
	{"UDP packet too short", "packet_short"},
	{"failed to receive and remove the stream label header", "stream_label"},
	{"unexpected double stream label header", "stream_label"},
	{"discarding stream with unacceptable label", "stream_label"},
	{"failed to receive", "stream_read"},
}

// RefusedKinds are the kinds Refused counts.
func RefusedKinds() []string {
	var out []string
	for _, r := range refusedKinds {
		if !slices.Contains(out, r.kind) {
			out = append(out, r.kind)
		}
	}
	return out
}

// Refused counts the datagrams and connections on the gossip port refused before any key let
// them in (junk, a wrong key, an unencrypted stream), by kind (RefusedKinds).
func (g *Gossip) Refused() map[string]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]uint64, len(g.refused))
	for k, v := range g.refused {
		out[k] = v
	}
	return out
}

// logBridge turns memberlist's "[LEVEL] memberlist: text" lines into slog records, a few of
// each kind a window.
type logBridge struct {
	lines *ratelog.Log
	count func(kind string)
}

func (g *Gossip) newLogBridge() *logBridge {
	return &logBridge{
		lines: ratelog.New(g.log, memberlistBurst, memberlistWindow),
		count: func(kind string) {
			g.mu.Lock()
			g.refused[kind]++
			g.mu.Unlock()
		},
	}
}

var memberlistLevels = []struct {
	prefix string
	level  slog.Level
}{
	{"[DEBUG]", slog.LevelDebug}, {"[TRACE]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo},
	{"[WARN]", slog.LevelWarn}, {"[ERR]", slog.LevelError}, {"[ERROR]", slog.LevelError},
}

func (b *logBridge) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for _, l := range memberlistLevels {
		if rest, ok := strings.CutPrefix(line, l.prefix); ok {
			level, line = l.level, strings.TrimSpace(rest)
			break
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	kind := refusedKind(line)
	if kind != "" {
		b.count(kind)
	} else {
		kind = lineKind(line)
	}
	b.lines.Line(level, kind, ratelog.Clip(line, 500), "source", "memberlist")
	return len(p), nil
}

// refusedKind is the kind of a line about refused traffic, or "".
func refusedKind(line string) string {
	for _, r := range refusedKinds {
		if strings.HasPrefix(line, r.prefix) {
			return r.kind
		}
	}
	return ""
}

// lineKind is the constant start of any other memberlist line: its text up to what varies (an
// error after a colon, a quoted or bracketed value, the sender's address).
func lineKind(line string) string {
	if i := strings.Index(line, " from="); i >= 0 {
		line = line[:i]
	}
	if i := strings.IndexAny(line, ":('\"%["); i >= 0 {
		line = line[:i]
	}
	return strings.TrimSpace(line)
}
