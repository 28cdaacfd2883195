package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// --json prints JSON and only JSON on stdout: one document, or one object a line for a stream
// (monitor); messages go to stderr. A command whose output is not data (a script, a document, a
// unit file) and a group of commands refuse --json, with exit 1 and nothing on stdout.

// noJSONKey is the annotation by which a command says it prints no JSON, and why.
const noJSONKey = "meshd/no-json"

// noJSON marks c as refusing --json: what says what it prints instead.
func noJSON(c *cobra.Command, what string) *cobra.Command {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[noJSONKey] = what
	return c
}

// jsonRefused refuses --json, before cobra runs, for a group of commands (cobra would print its
// help on stdout and exit 0) and for a command marked noJSON. It returns nil when --json is not
// given, or means something, or the arguments are cobra's to refuse.
func jsonRefused(root *cobra.Command, args []string) error {
	if len(args) > 0 && strings.HasPrefix(args[0], "__") {
		return nil // cobra's hidden completion commands
	}
	c, rest, err := root.Find(args)
	if err != nil || c == root {
		return nil
	}
	group := c.HasSubCommands() && !c.Runnable()
	what := c.Annotations[noJSONKey]
	if !group && what == "" {
		return nil
	}
	c.InitDefaultHelpFlag()
	if c.ParseFlags(rest) != nil {
		return nil // cobra says what is wrong with the flags
	}
	if f := c.Flags().Lookup("json"); f == nil || f.Value.String() != "true" {
		return nil
	}
	if group {
		var subs []string
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() {
				subs = append(subs, s.Name())
			}
		}
		return fmt.Errorf("%s --json: %s is a group of commands (%s); --json is theirs, e.g. `%s %s --json`",
			c.CommandPath(), c.Name(), strings.Join(subs, ", "), c.CommandPath(), subs[0])
	}
	return fmt.Errorf("%s --json: it prints %s, not JSON; run it without --json", c.CommandPath(), what)
}

// logJSON turns monitor's stream into one JSON object a line on out (logLine); the stream's own
// notices (lines beginning "# ": the monitor began, lines were dropped) go to notes.
type logJSON struct {
	out, notes io.Writer
	buf        []byte
}

func (l *logJSON) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(l.buf[:i])
		l.buf = l.buf[i+1:]
		if strings.HasPrefix(line, "# ") {
			fmt.Fprintln(l.notes, line)
			continue
		}
		b, err := json.Marshal(logLine(line))
		if err != nil {
			return 0, err
		}
		if _, err := l.out.Write(append(b, '\n')); err != nil {
			return 0, err
		}
	}
}

// logLine is one log line as JSON: "line" as written and, when slog's text handler wrote it,
// its "time", "level" and "msg", and its other keys in "attrs".
func logLine(line string) map[string]any {
	v := map[string]any{"line": line}
	kv, ok := slogFields(line)
	if !ok {
		return v
	}
	attrs := map[string]string{}
	for k, val := range kv {
		switch k {
		case "time", "level", "msg":
			v[k] = val
		default:
			attrs[k] = val
		}
	}
	if len(attrs) > 0 {
		v["attrs"] = attrs
	}
	return v
}

// slogFields reads the key=value pairs of a line slog's text handler wrote (a value quoted as Go
// quotes it when it has spaces); ok is false when the line is not one.
func slogFields(line string) (map[string]string, bool) {
	m := map[string]string{}
	for s := line; s != ""; s = strings.TrimPrefix(s, " ") {
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || strings.ContainsAny(s[:eq], " \"") {
			return nil, false
		}
		key, val := s[:eq], s[eq+1:]
		if strings.HasPrefix(val, `"`) {
			q, err := strconv.QuotedPrefix(val)
			if err != nil {
				return nil, false
			}
			m[key], _ = strconv.Unquote(q)
			s = val[len(q):]
			continue
		}
		end := strings.IndexByte(val, ' ')
		if end < 0 {
			end = len(val)
		}
		m[key], s = val[:end], val[end:]
	}
	return m, len(m) > 0
}
