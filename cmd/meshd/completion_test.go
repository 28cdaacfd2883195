package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"meshd/internal/testenv"
)

// `meshd completion bash`, loaded into a real bash, completes meshd's commands and flags; zsh's
// and fish's scripts are their shells' own kinds; another shell is refused, naming the three.
func TestCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	const lib = "/usr/share/bash-completion/bash_completion"
	if _, serr := os.Stat(lib); err != nil || serr != nil {
		testenv.Prereq(t, "the completion test needs bash and Debian's bash-completion (scripts/deps.sh installs it)")
	}
	complete := func(line string) string {
		t.Helper()
		words := strings.Fields(line)
		if strings.HasSuffix(line, " ") {
			words = append(words, "")
		}
		script := `source ` + lib + `
source <(meshd completion bash)
COMP_LINE="$LINE"; COMP_POINT=${#COMP_LINE}; COMP_WORDS=(` + strings.Join(quoteAll(words), " ") + `); COMP_CWORD=$((${#COMP_WORDS[@]}-1))
__start_meshd meshd
printf '%s\n' "${COMPREPLY[@]}"`
		cmd := exec.Command(bash, "-c", script)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(meshdBin)+":"+os.Getenv("PATH"), "LINE="+line)
		// compopt complains on stderr outside a real prompt; the candidates are on stdout.
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("bash completion of %q: %v\n%s", line, err, out)
		}
		return string(out)
	}
	if got := complete("meshd mod"); strings.TrimSpace(got) != "module" {
		t.Errorf("meshd mod<TAB> completes to %q; want module", got)
	}
	if got := complete("meshd module "); !strings.Contains(got, "assign") || !strings.Contains(got, "take") {
		t.Errorf("meshd module <TAB> offers %q; want assign and take among them", got)
	}
	if got := complete("meshd converge hub --pre"); !strings.Contains(got, "--preview") {
		t.Errorf("meshd converge hub --pre<TAB> offers %q; want --preview", got)
	}
	for shell, begins := range map[string]string{"zsh": "#compdef meshd", "fish": "# fish completion for meshd"} {
		out, err := exec.Command(meshdBin, "completion", shell).Output()
		if err != nil || !strings.HasPrefix(string(out), begins) {
			t.Errorf("meshd completion %s: %v; begins %.40q, want %q", shell, err, out, begins)
		}
	}
	out, err := exec.Command(meshdBin, "completion", "tcsh").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "give bash, zsh or fish") {
		t.Errorf("meshd completion tcsh: %v\n%s", err, out)
	}
}

func quoteAll(words []string) []string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = "'" + w + "'"
	}
	return out
}
