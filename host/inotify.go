package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dirEvents are what a watched directory reports: an entry created, written, closed after a
// write, moved in or out, its mode or owner changed, removed; and the directory itself removed or
// moved away (the watch then moves up to the nearest directory still there).
const dirEvents = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// fileWatch watches, through one inotify instance, the directory of every followed path — or,
// while that directory is missing, the nearest directory above it that exists, for the name of
// the next one down — and calls touched when an entry of interest changes. Only the names that
// matter count: an editor's swap files beside a declared file wake nothing.
type fileWatch struct {
	root    string
	f       *os.File // the inotify instance, non-blocking, so closing it ends a read
	fd      int
	touched func()
	log     *slog.Logger

	mu    sync.Mutex
	paths []string // the declared paths followed, root prefix not included
	// wds are the watches by descriptor: the directory and the names in it that count.
	wds   map[int]*watchedDir
	byDir map[string]int
}

type watchedDir struct {
	dir   string
	names map[string]bool
}

func newFileWatch(root string, touched func(), log *slog.Logger) (*fileWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	return &fileWatch{root: root, f: os.NewFile(uintptr(fd), "inotify"), fd: fd, touched: touched, log: log,
		wds: map[int]*watchedDir{}, byDir: map[string]int{}}, nil
}

// follow makes the watched directories those of paths (declared paths, without the root).
func (fw *fileWatch) follow(paths []string) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.paths = fw.paths[:0]
	for _, p := range paths {
		// Only what the host would act on: a clean absolute path, never one climbing out of root.
		if path.IsAbs(p) && path.Clean(p) == p && p != "/" {
			fw.paths = append(fw.paths, p)
		}
	}
	fw.syncLocked()
}

// syncLocked adds a watch for each directory the followed paths need now and removes the others.
// A directory made just before its parent's watch was added raised its event before anyone
// listened, so the anchors are looked at again until they stay where they are.
func (fw *fileWatch) syncLocked() {
	for range 8 {
		if fw.syncOnce() {
			return
		}
	}
}

// syncOnce watches what the followed paths need and says whether the anchors stayed put.
func (fw *fileWatch) syncOnce() bool {
	want := fw.anchors()
	fw.apply(want)
	again := fw.anchors()
	if len(again) != len(want) {
		return false
	}
	for dir := range again {
		if want[dir] == nil {
			return false
		}
	}
	return true
}

// anchors is the directory to watch for each followed path, with the names in it that count.
func (fw *fileWatch) anchors() map[string]map[string]bool {
	want := map[string]map[string]bool{}
	for _, p := range fw.paths {
		dir, name := fw.anchor(p)
		if want[dir] == nil {
			want[dir] = map[string]bool{}
		}
		want[dir][name] = true
	}
	return want
}

// apply adds a watch for each directory of want and removes the others.
func (fw *fileWatch) apply(want map[string]map[string]bool) {
	for dir, names := range want {
		wd, ok := fw.byDir[dir]
		if !ok {
			var err error
			wd, err = unix.InotifyAddWatch(fw.fd, dir, dirEvents)
			if err != nil {
				// Gone between the look and the watch, or not a directory: the next pass follows
				// again.
				fw.log.Debug("file watch: directory not watched", "dir", dir, "err", err)
				continue
			}
			fw.byDir[dir] = wd
		}
		fw.wds[wd] = &watchedDir{dir: dir, names: names}
	}
	for dir, wd := range fw.byDir {
		if want[dir] == nil {
			_, _ = unix.InotifyRmWatch(fw.fd, uint32(wd))
			delete(fw.byDir, dir)
			delete(fw.wds, wd)
		}
	}
}

// anchor is the directory to watch for the declared path p and the name in it that leads to p:
// p's own directory and base name, or while that directory is missing, the nearest one above
// that exists and the name of the next one down.
func (fw *fileWatch) anchor(p string) (dir, name string) {
	full := filepath.Join(fw.root, p)
	dir, name = filepath.Dir(full), filepath.Base(full)
	for dir != fw.root && dir != "/" {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			break
		}
		dir, name = filepath.Dir(dir), filepath.Base(dir)
	}
	return dir, name
}

// run reads events until ctx ends or the instance is closed.
func (fw *fileWatch) run(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { _ = fw.f.Close() })
	defer stop()
	buf := make([]byte, 64*1024)
	for {
		n, err := fw.f.Read(buf)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, os.ErrClosed) {
				fw.log.Warn("file watch stopped: drift in files is noticed on the timer only", "err", err)
			}
			return
		}
		if fw.handle(buf[:n]) {
			fw.touched()
		}
	}
}

// handle reads one batch of events and says whether any concerns a followed path. A directory
// removed or moved away, or a directory of interest appearing, moves the watches.
func (fw *fileWatch) handle(b []byte) bool {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	hit, resync := false, false
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			break
		}
		name := ""
		if ev.Len > 0 {
			raw := b[unix.SizeofInotifyEvent:end]
			for i, c := range raw {
				if c == 0 {
					raw = raw[:i]
					break
				}
			}
			name = string(raw)
		}
		b = b[end:]
		switch {
		case ev.Mask&unix.IN_Q_OVERFLOW != 0:
			hit, resync = true, true // events were lost: look at everything
		case ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0:
			// The directory went: watch from above until it is back.
			if w, ok := fw.wds[int(ev.Wd)]; ok {
				if ev.Mask&unix.IN_MOVE_SELF != 0 {
					_, _ = unix.InotifyRmWatch(fw.fd, uint32(ev.Wd))
				}
				delete(fw.byDir, w.dir)
				delete(fw.wds, int(ev.Wd))
				hit, resync = true, true
			}
		default:
			if w, ok := fw.wds[int(ev.Wd)]; ok && w.names[name] {
				hit = true
				if ev.Mask&unix.IN_ISDIR != 0 || ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_DELETE|unix.IN_MOVED_FROM) != 0 {
					resync = true // a directory on the way to a declared path came or went
				}
			}
		}
	}
	if resync {
		fw.syncLocked()
	}
	return hit
}

func (fw *fileWatch) close() { _ = fw.f.Close() }
