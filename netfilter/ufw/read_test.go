package ufw

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"meshd/netfilter"
)

// fileRunner answers `test -e` and `cat` from a map of file contents, each path's reads in
// turn (the last one repeats), as ufw's files look to a reader while ufw rewrites them.
type fileRunner struct {
	files   map[string][]string
	reads   map[string]int
	testErr error // what `test -e` fails with, if set
}

func (f *fileRunner) Run(ctx context.Context, _ []byte, name string, args ...string) ([]byte, error) {
	p := args[len(args)-1]
	versions, ok := f.files[p]
	switch name {
	case "test":
		if f.testErr != nil {
			return nil, f.testErr
		}
		if !ok {
			return nil, exec.CommandContext(ctx, "false").Run() // exit status 1, as test(1) says "absent"
		}
		return nil, nil
	case "cat":
		i := min(f.reads[p], len(versions)-1)
		f.reads[p]++
		return []byte(versions[i]), nil
	}
	return nil, errors.New("unexpected command " + name)
}

const (
	ufwWhole = "*filter\n### RULES ###\n\n### tuple ### allow tcp 22 0.0.0.0/0 any 0.0.0.0/0 in\n" +
		"-A ufw-user-input -p tcp --dport 22 -j ACCEPT\n\n### END RULES ###\nCOMMIT\n"
	ufw6Whole = "*filter\n### RULES ###\nCOMMIT\n"
)

func TestReadUFWTuplesWaitsOutAHalfWrittenFile(t *testing.T) {
	half := ufwWhole[:strings.Index(ufwWhole, "### tuple")] // ufw has truncated and not yet written the rule
	f := &fileRunner{files: map[string][]string{UserRules: {half, "", ufwWhole}, User6: {ufw6Whole}}, reads: map[string]int{}}
	ts, err := readTuples(context.Background(), netfilter.Env{Runner: f})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].Text != "allow tcp 22 0.0.0.0/0 any 0.0.0.0/0 in" || ts[0].Comment != "" {
		t.Fatalf("read %+v, want the found firewall's own 22/tcp rule", ts)
	}
	if f.reads[UserRules] != 3 {
		t.Fatalf("user.rules read %d times, want 3 (half, empty, whole)", f.reads[UserRules])
	}
}

func TestReadUFWTuplesNeverTakesAFailedReadForNoRules(t *testing.T) {
	for name, f := range map[string]*fileRunner{
		"test -e cannot run": {files: map[string][]string{UserRules: {ufwWhole}}, testErr: errors.New("nsenter: cannot open /proc/1/ns/mnt")},
		"user.rules missing": {files: map[string][]string{User6: {ufw6Whole}}},
		"always half":        {files: map[string][]string{UserRules: {ufwWhole[:40]}, User6: {ufw6Whole}}},
	} {
		f.reads = map[string]int{}
		ts, err := readTuples(context.Background(), netfilter.Env{Runner: f})
		if err == nil {
			t.Errorf("%s: read %d rules and no error; a pass would decide from a rule list that is not ufw's", name, len(ts))
			continue
		}
		t.Logf("%s: %v", name, err)
	}
}

func TestReadUFWTuplesWithoutUser6(t *testing.T) {
	f := &fileRunner{files: map[string][]string{UserRules: {ufwWhole}}, reads: map[string]int{}}
	if ts, err := readTuples(context.Background(), netfilter.Env{Runner: f}); err != nil || len(ts) != 1 {
		t.Fatalf("read %+v, %v; want the one rule of user.rules", ts, err)
	}
}

// A rules file as the package ships it (no "### END RULES ###": ufw has not written it yet) is
// left byte for byte alone when nothing of it changes, as user6.rules is under IPV6=no; an edit
// that would change it is refused as unsupported, so the driver lets ufw's own command write it.
func TestEditUFWRulesLeavesAShippedFileAlone(t *testing.T) {
	shipped := []byte("*filter\n:ufw6-user-input - [0:0]\n### RULES ###\nCOMMIT\n")
	web := marked{mark: "meshd:web:incoming:tcp/7000:anywhere", text: "allow tcp 7000 0.0.0.0/0 any 0.0.0.0/0 in"}
	office := marked{mark: "meshd:office:incoming:tcp/9000:10.0.0.0/8", text: "allow tcp 9000 0.0.0.0/0 any 10.0.0.0/8 in"}
	got, err := editRules(shipped, []marked{office}, nil, true)
	if err != nil || string(got) != string(shipped) {
		t.Fatalf("an IPv4-only rule changed the shipped user6.rules: %v\n%s", err, got)
	}
	if _, err := editRules(shipped, []marked{web}, nil, true); !errors.Is(err, netfilter.ErrUnsupported) {
		t.Fatalf("an IPv6 twin into a file ufw has not written: %v, want ErrUnsupported", err)
	}
}
