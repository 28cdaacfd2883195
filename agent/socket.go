package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"meshd/api"

	"golang.org/x/sys/unix"
)

// The operator's socket is the whole operator API, writes included: only root (and the agent's
// own user, when it is not root) and, when configured, one group may use it. The file mode says so
// to the kernel, and every connection's peer credentials (SO_PEERCRED) are checked again, so a
// socket whose mode was changed behind the agent's back still lets no one else in.

// The socket's directory (/run/meshd) holds the socket alone, and a caller must search it to
// connect: it is 0700, root's; with a socket group 0750 and that group's, so its members reach
// the socket (whose own mode and SO_PEERCRED still decide). A directory the agent creates, and
// meshd's own /run/meshd whoever created it first (the unit's RuntimeDirectory=, a 0755 mkdir),
// is given that mode at every start; a directory of the operator's choosing that exists is left
// as it is.

// ownSocketDir is meshd's own directory for its socket; a variable for the tests.
var ownSocketDir = filepath.Dir(api.DefaultSocket)

// socketDirMode is the mode of the socket's directory: 0700, or 0750 with a group (gid >= 0).
func socketDirMode(gid int) os.FileMode {
	if gid >= 0 {
		return 0o750
	}
	return 0o700
}

// makeSocketDir creates the socket's directory dir, or gives meshd's own its mode and group.
func makeSocketDir(dir string, gid int) error {
	mode := socketDirMode(gid)
	st, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, mode); err != nil {
			return fmt.Errorf("create socket dir %s: %w", dir, err)
		}
	case err != nil:
		return fmt.Errorf("socket dir %s: %w", dir, err)
	case !st.IsDir():
		return fmt.Errorf("socket dir %s is a %s, not a directory: move it away or give the agent --socket", dir, fileKind(st.Mode()))
	case filepath.Clean(dir) != ownSocketDir:
		return nil // the operator's own directory
	}
	if gid >= 0 {
		if err := os.Lchown(dir, -1, gid); err != nil {
			return fmt.Errorf("socket dir %s: give it group %d: %w", dir, gid, err)
		}
	}
	if err := os.Chmod(dir, mode); err != nil {
		return fmt.Errorf("socket dir %s: chmod %04o: %w", dir, mode, err)
	}
	return nil
}

// listenSocket opens the operator's unix socket at path, in a directory made by makeSocketDir; a
// socket left by an agent that died is replaced, one another agent is serving is not, and
// anything at the path that is not a socket is refused, never removed. The socket is bound in a
// private directory, given its mode (0600, or 0660 and the group gid when gid >= 0) and only then
// moved to path, so it is never reachable with the default mode.
func listenSocket(path string, gid int) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := makeSocketDir(dir, gid); err != nil {
		return nil, err
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("socket path %s holds a %s, not a socket: meshd removes nothing else; move it away or give the agent --socket", path, fileKind(st.Mode()))
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s is served by another agent; stop it or give this one --socket", path)
		}
	}
	// a short name: a unix socket's path must fit in 108 bytes, and this one is bound first
	private, err := os.MkdirTemp(dir, ".ms")
	if err != nil {
		return nil, fmt.Errorf("socket %s: private dir in %s: %w", path, dir, err)
	}
	defer os.RemoveAll(private)
	tmp := filepath.Join(private, "s")
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	fail := func(err error) (net.Listener, error) {
		ln.Close()
		return nil, err
	}
	mode := os.FileMode(0o600)
	if gid >= 0 {
		mode = 0o660
		if err := os.Lchown(tmp, -1, gid); err != nil {
			return fail(fmt.Errorf("socket %s: give it group %d: %w", path, gid, err))
		}
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(fmt.Errorf("chmod %s: %w", path, err))
	}
	// The listener would unlink the private path on Close; the agent removes path itself (Stop).
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Rename(tmp, path); err != nil {
		return fail(fmt.Errorf("socket %s: move into place: %w", path, err))
	}
	return ln, nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m.IsRegular():
		return "regular file"
	default:
		return "special file (" + m.Type().String() + ")"
	}
}

// SocketGroupID resolves the configured socket group (a name or a number); "" is -1, no group.
func SocketGroupID(group string) (int, error) {
	if group == "" {
		return -1, nil
	}
	if n, err := strconv.Atoi(group); err == nil && n >= 0 {
		return n, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return -1, fmt.Errorf("socket group %q: %w", group, err)
	}
	return strconv.Atoi(g.Gid)
}

type peerCredKey struct{}

// peerCred is a connection's peer credentials, or the reason they could not be read.
type peerCred struct {
	cred *unix.Ucred
	err  error
}

// withPeerCred is the operator server's ConnContext: it reads each connection's SO_PEERCRED once.
func withPeerCred(ctx context.Context, c net.Conn) context.Context {
	pc := peerCred{}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		pc.err = fmt.Errorf("not a unix socket connection")
		return context.WithValue(ctx, peerCredKey{}, pc)
	}
	raw, err := uc.SyscallConn()
	if err == nil {
		cerr := raw.Control(func(fd uintptr) {
			pc.cred, pc.err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		})
		if cerr != nil {
			pc.err = cerr
		}
	} else {
		pc.err = err
	}
	return context.WithValue(ctx, peerCredKey{}, pc)
}

// onlyOperators answers 403 to a caller whose uid is not root (or the agent's own) and who is not
// in the socket group gid (-1: none).
func onlyOperators(gid int, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		pc, _ := req.Context().Value(peerCredKey{}).(peerCred)
		if err := operatorAllowed(pc, gid, groupsOf); err != nil {
			api.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: err.Error()})
			return
		}
		next.ServeHTTP(w, req)
	})
}

// operatorAllowed is the socket's rule: root, the agent's own user, or a member of group gid (its
// primary group or a supplementary one, as groups reads them for the peer's pid).
func operatorAllowed(pc peerCred, gid int, groups func(pid int32) ([]int, error)) error {
	if pc.cred == nil {
		return fmt.Errorf("the operator socket could not tell who is calling (%v): refused", pc.err)
	}
	uid := int(pc.cred.Uid)
	if uid == 0 || uid == os.Geteuid() {
		return nil
	}
	if gid >= 0 {
		if int(pc.cred.Gid) == gid {
			return nil
		}
		if gs, err := groups(pc.cred.Pid); err == nil && slices.Contains(gs, gid) {
			return nil
		}
		return fmt.Errorf("uid %d is neither root nor in the operator socket's group %d: refused", uid, gid)
	}
	return fmt.Errorf("uid %d is not root, and the operator socket has no group configured (socket_group, --socket-group): refused", uid)
}

// groupsOf reads a process's supplementary groups from /proc/PID/status.
func groupsOf(pid int32) ([]int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Groups:")
		if !ok {
			continue
		}
		var out []int
		for _, f := range strings.Fields(rest) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
		return out, nil
	}
	return nil, syscall.ENOENT
}
