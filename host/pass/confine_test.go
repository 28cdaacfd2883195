package pass

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A confined module's mount is judged where it leads: its own place (there or not yet), and not
// a symlink out of it, one that leads nowhere, or the other spelling of /run.
func TestConfineJudgesWhereAPathLeads(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"etc/cron.d", "srv/app/real", "var/run/dbus"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, to := range map[string]string{"srv/app/out": filepath.Join(root, "etc/cron.d"), "srv/app/nowhere": filepath.Join(root, "etc/none"),
		"srv/app/in": "real", "srv/app/up": "../.."} {
		if err := os.Symlink(to, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		p, says string
	}{
		{"/srv/app", ""}, {"/srv/app/real", ""}, {"/srv/app/in/x", ""}, {"/srv/app/missing/deeper", ""}, {"/var/lib/app", ""},
		{"/srv/app/out", "leads to /etc/cron.d"},
		{"/srv/app/out/job", "leads to /etc/cron.d/job"},
		{"/srv/app/nowhere", "leads nowhere"},
		{"/srv/app/up", "outside the module's own places"},
		{"/var/run/dbus", "outside the module's own places"},
	} {
		err := Own{}.Confine(root, "a mount of", "app", c.p)
		if (err == nil) != (c.says == "") || (err != nil && !strings.Contains(err.Error(), c.says)) {
			t.Errorf("%s: %v, want %q", c.p, err, c.says)
		}
	}
	// The module's data directory in this node's data dir is its own too, where it leads.
	o := Own{Data: filepath.Join(root, "data")}
	if err := os.MkdirAll(filepath.Join(o.Data, "store"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "etc"), filepath.Join(o.Data, "evil")); err != nil {
		t.Fatal(err)
	}
	if err := o.Confine("/", "a mount of", "store", filepath.Join(o.Data, "store")); err != nil {
		t.Errorf("the store's own data: %v", err)
	}
	if err := o.Confine("/", "a mount of", "evil", filepath.Join(o.Data, "evil")); err == nil || !strings.Contains(err.Error(), "outside the module's own places") {
		t.Errorf("a data directory that is a symlink to /etc: %v", err)
	}
}
