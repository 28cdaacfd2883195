package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// readSecret reads a secret (a join token, a recovery code) from file, or from standard input
// when file is "-": its first line, trimmed. A secret given on the command line can be read by
// every user of the machine (ps, /proc/PID/cmdline); one in a file or on standard input cannot.
func readSecret(what, file string, stdin io.Reader) (string, error) {
	var r io.Reader = stdin
	name := "standard input"
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("%s file: %w", what, err)
		}
		defer f.Close()
		r, name = f, file
	}
	line, err := bufio.NewReader(io.LimitReader(r, 64<<10)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("%s from %s: %w", what, name, err)
	}
	if s := strings.TrimSpace(line); s != "" {
		return s, nil
	}
	return "", fmt.Errorf("%s from %s: it is empty (the %s goes on its first line)", what, name, what)
}

// secretFrom picks a secret given as a value or through a file (exactly one of them).
func secretFrom(what, value, valueFlag, file, fileFlag string, stdin io.Reader) (string, error) {
	switch {
	case value != "" && file != "":
		return "", fmt.Errorf("give the %s once: %s or %s, not both", what, valueFlag, fileFlag)
	case file != "":
		return readSecret(what, file, stdin)
	case value != "":
		return value, nil
	}
	return "", fmt.Errorf("the %s is required: %s, or %s FILE (- for standard input, which other users cannot read)", what, valueFlag, fileFlag)
}
