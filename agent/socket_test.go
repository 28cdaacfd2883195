package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"meshd/api"
	"meshd/internal/testenv"
)

// Something at the socket path that is not a socket is never removed: the agent refuses, naming
// it. A socket no one serves is replaced; one an agent serves is refused.
func TestSocketPathHoldingSomethingElse(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file.sock")
	os.WriteFile(file, []byte("precious"), 0o644)
	sub := filepath.Join(dir, "dir.sock")
	os.Mkdir(sub, 0o755)
	link := filepath.Join(dir, "link.sock")
	os.Symlink(file, link)
	for path, kind := range map[string]string{file: "regular file", sub: "directory", link: "symbolic link"} {
		ln, err := listenSocket(path, -1)
		if err == nil {
			ln.Close()
			t.Fatalf("%s (a %s) was replaced by the socket", path, kind)
		}
		if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), kind) {
			t.Fatalf("the refusal does not name %s as a %s: %v", path, kind, err)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "precious" {
		t.Fatalf("%s changed: %q", file, b)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was removed: %v", err)
	}

	// A socket left behind by an agent that died: replaced.
	sock := filepath.Join(dir, "meshd.sock")
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	ln, err := listenSocket(sock, -1)
	if err != nil {
		t.Fatalf("a stale socket was not replaced: %v", err)
	}
	defer ln.Close()
	// One that is served: refused.
	if ln2, err := listenSocket(sock, -1); err == nil || !strings.Contains(err.Error(), "served by another agent") {
		if ln2 != nil {
			ln2.Close()
		}
		t.Fatalf("a served socket: %v", err)
	}
}

// The socket is 0600 from the moment it can be reached, whatever the umask, and nothing of its
// private directory is left beside it.
func TestSocketModeWhateverTheUmask(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	sock := filepath.Join(dir, "meshd.sock")
	ln, err := listenSocket(sock, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	st, err := os.Lstat(sock)
	if err != nil || st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v %v, want a socket 0600", sock, st.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("the socket dir holds %d entries, want the socket alone", len(entries))
	}
	// It serves: a connection gets through.
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	c, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		t.Fatalf("the socket moved into place does not answer: %v", err)
	}
	c.Close()
}

// The socket's rule on peer credentials: root and the agent's own user, else only a member of the
// configured group (primary or supplementary); no credentials, no entry.
func TestOperatorAllowed(t *testing.T) {
	groups := func(int32) ([]int, error) { return []int{27, 1001}, nil }
	cases := []struct {
		name    string
		cred    *unix.Ucred
		gid     int
		allowed bool
	}{
		{"root", &unix.Ucred{Uid: 0, Gid: 0}, -1, true},
		{"the agent's own user", &unix.Ucred{Uid: uint32(os.Geteuid())}, -1, true},
		{"a user, no group configured", &unix.Ucred{Uid: 4242, Gid: 4242}, -1, false},
		{"a user of another group", &unix.Ucred{Uid: 4242, Gid: 4242}, 3000, false},
		{"a user whose primary group is the socket's", &unix.Ucred{Uid: 4242, Gid: 3000}, 3000, true},
		{"a user with the socket's group as a supplementary one", &unix.Ucred{Uid: 4242, Gid: 4242}, 1001, true},
		{"no credentials", nil, 1001, false},
	}
	for _, c := range cases {
		if c.cred != nil && c.cred.Uid == uint32(os.Geteuid()) && c.name != "the agent's own user" && c.name != "root" {
			continue // the test runs as this uid: the case cannot be told apart
		}
		err := operatorAllowed(peerCred{cred: c.cred, err: errors.New("no SO_PEERCRED")}, c.gid, groups)
		if (err == nil) != c.allowed {
			t.Errorf("%s: allowed %v, want %v (%v)", c.name, err == nil, c.allowed, err)
		}
	}
}

// On a real socket, as root: a caller that is not root and not in the group gets 403 even when
// the socket's mode was opened behind the agent's back, and gets in once the group is its own.
func TestOperatorSocketChecksPeerCredentials(t *testing.T) {
	testenv.RequireRoot(t, "the operator socket's peer credential check (a caller of another uid)", "setpriv", "curl")
	// A directory the other uid can reach (t.TempDir's parent is 0700).
	dir, err := os.MkdirTemp("", "meshd-socket-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	const nobody = 65534
	for _, gid := range []int{-1, nobody} {
		sock := filepath.Join(dir, "meshd.sock")
		ln, err := listenSocket(sock, gid)
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o600)
		if gid >= 0 {
			want = 0o660
		}
		st, _ := os.Lstat(sock)
		if st.Mode().Perm() != want || int(st.Sys().(*syscall.Stat_t).Gid) != max(gid, 0) {
			t.Fatalf("socket with group %d: mode %v gid %d", gid, st.Mode().Perm(), st.Sys().(*syscall.Stat_t).Gid)
		}
		os.Chmod(sock, 0o666) // opened behind the agent's back
		srv := &http.Server{ConnContext: withPeerCred, Handler: onlyOperators(gid, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			api.WriteJSON(w, http.StatusOK, map[string]string{"ok": "yes"})
		}))}
		go srv.Serve(ln)
		out, err := exec.Command("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
			"curl", "-s", "-w", "\n%{http_code}", "--unix-socket", sock, "http://meshd/v1/status").CombinedOutput()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		srv.Shutdown(ctx)
		cancel()
		os.Remove(sock)
		if err != nil {
			t.Fatalf("curl as nobody: %v\n%s", err, out)
		}
		text := strings.TrimSpace(string(out))
		i := strings.LastIndex(text, "\n")
		body, code := text[:max(i, 0)], text[i+1:]
		var ans struct{ Error, OK string }
		_ = json.Unmarshal([]byte(body), &ans)
		if gid < 0 && (code != "403" || !strings.Contains(ans.Error, "uid 65534")) {
			t.Fatalf("nobody with no group configured: %s %s", code, body)
		}
		if gid >= 0 && code != "200" {
			t.Fatalf("nobody with the socket group %d: %s %s", gid, code, body)
		}
		t.Logf("group %d: nobody gets %s %s", gid, code, body)
	}
}
