package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"meshd/fsm"
	"meshd/host/pass"
	"meshd/report"
)

// fileCtx is one file pass: the records read at its start and the report it fills.
type fileCtx struct {
	written map[string]writtenRecord
	found   map[string]foundRecord
	rep     *report.Report
	// staged are the writes that replace a found file, by module: rendered and their latest
	// bytes recorded, written at the module's cutover (cutoverFiles), after its containers.
	staged map[string][]stagedWrite
}

// files reconciles the declared files, then what the records know of files no longer declared.
// The writes that replace found files are only staged; the caller cuts them over (cutoverFiles).
func (h *Host) files(ctx context.Context, d *fsm.Declaration, rs []fsm.Resource, rep *report.Report) *fileCtx {
	fc := &fileCtx{rep: rep, staged: map[string][]stagedWrite{}}
	written, found, err := h.st.records()
	if err != nil {
		for _, r := range rs {
			rep.Errors = append(rep.Errors, report.ResourceError{Resource: r.ID(), Module: r.Module, Reason: err.Error()})
		}
		return fc
	}
	fc.written, fc.found = written, found
	declared := map[string]string{} // path -> module declaring it
	for _, r := range rs {
		if ctx.Err() != nil {
			return fc
		}
		if r.File == nil {
			rep.Errors = append(rep.Errors, report.ResourceError{Resource: r.ID(), Module: r.Module, Reason: "a file resource without a file"})
			continue
		}
		p := r.File.Path
		if other, dup := declared[p]; dup {
			h.fail(fc, r, fmt.Errorf("is declared also by module %s; one module a path", other))
			continue
		}
		declared[p] = r.Module
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			h.fail(fc, r, errors.New("is not a clean absolute path"))
			continue
		}
		taken := r.Taken || d.Mode == fsm.Converged
		if err := h.file(fc, r, taken); err != nil {
			h.fail(fc, r, err)
		}
	}
	// Files no longer declared: what the host created goes; what it found stays.
	var gone []string
	for p := range written {
		if _, ok := declared[p]; !ok {
			gone = append(gone, p)
		}
	}
	sort.Strings(gone)
	for _, p := range gone {
		if ctx.Err() != nil {
			return fc
		}
		if _, wasFound := found[p]; wasFound {
			continue // it replaced a found file: left as it is, its original kept
		}
		if err := h.removeCreated(fc, p, written[p]); err != nil {
			rep.Errors = append(rep.Errors, report.ResourceError{Resource: fsm.KindFile + ":" + p, Module: written[p].Module,
				Reason: fmt.Sprintf("file %s, created for a module no longer assigned, cannot be removed: %v", p, err)})
		}
	}
	var held []string
	for p := range found {
		if _, ok := declared[p]; !ok {
			if _, replaced := written[p]; !replaced {
				held = append(held, p)
			}
		}
	}
	sort.Strings(held)
	for _, p := range held {
		fr := found[p]
		hf := report.HeldFile{Path: p, Module: fr.Module, RecordedHash: fr.Hash, Since: fr.At, Unassigned: true}
		loc, err := locate(h.root, p)
		if err != nil {
			hf.Changed, hf.Reason = true, fmt.Sprintf("%s: %v", report.ChangedBySomethingElse, err)
		} else {
			h.observeHeld(&hf, loc)
		}
		rep.Held = append(rep.Held, hf)
	}
	return fc
}

func (h *Host) fail(fc *fileCtx, r fsm.Resource, err error) {
	reason := fmt.Sprintf("file %s %v", r.File.Path, err)
	fc.rep.Errors = append(fc.rep.Errors, report.ResourceError{Resource: r.ID(), Module: r.Module, Reason: reason})
	h.log.Warn("file failed", "path", r.File.Path, "module", r.Module, "reason", err)
}

func (h *Host) observeHeld(hf *report.HeldFile, loc located) {
	if !loc.exists {
		hf.Changed, hf.Reason = true, report.RemovedBySomethingElse
		return
	}
	hf.CurrentHash = pass.HashOf(loc.content)
	if hf.CurrentHash != hf.RecordedHash {
		hf.Changed, hf.Reason = true, report.ChangedBySomethingElse
	}
}

// fileStep is what the host does to one declared file this pass.
type fileStep int

const (
	fileObserveHeld fileStep = iota // held, module not taken: observed, never touched
	fileHold                        // found, module not taken: its original recorded, then held
	fileKeepOnce                    // create_once and there: never rewritten
	fileFixMeta                     // the host's, content as declared: mode and owner set if wrong
	fileWrite                       // written: created, replacing a found one, or converged back
)

// fileAction is the decision for one declared file.
type fileAction struct {
	step fileStep
	// recordFound: a found file on a take or a converged node has its original recorded first.
	recordFound bool
	// stage: the write replaces a file the host found (held, or found this pass): its latest
	// bytes, mode and owner are recorded, and it is written at its module's cutover, after the
	// module's containers, put back if the cutover fails.
	stage bool
}

// fileFacts is what decideFile decides from: the records, what is at the path, the declaration.
type fileFacts struct {
	// ours: the host wrote it (a written record); wasFound: its original is recorded.
	ours, wasFound bool
	// exists: something is at the path; sameContent: its content already is the declaration.
	exists, sameContent bool
	// taken: the module is taken (every module is on a converged node).
	taken bool
	// createOnce: the file is create_once.
	createOnce bool
}

// decideFile is the file kind's decision (see the package doc): a pure function of the facts.
func decideFile(f fileFacts) fileAction {
	if !f.ours && !f.taken {
		switch {
		case f.wasFound:
			return fileAction{step: fileObserveHeld}
		case f.exists:
			return fileAction{step: fileHold}
		}
		// Not found: assigning prepares, so it is created.
	}
	a := fileAction{recordFound: !f.ours && !f.wasFound && f.exists}
	switch {
	case f.createOnce && f.exists:
		a.step = fileKeepOnce
	case f.ours && f.exists && f.sameContent:
		a.step = fileFixMeta
	default:
		a.step = fileWrite
		a.stage = !f.ours && f.exists
	}
	return a
}

// file reconciles one declared file: it looks, decides, then acts. taken says it converges;
// otherwise what is found is held.
func (h *Host) file(fc *fileCtx, r fsm.Resource, taken bool) error {
	f := r.File
	p := f.Path
	if err := h.own.Refuse("a file at", r.Module, filepath.Join(h.root, p)); err != nil {
		return err
	}
	loc, err := locate(h.root, p)
	if err != nil {
		return err
	}
	if r.Confined { // judged where the walk leads, before anything is recorded or written
		if err := h.own.ConfineReal(h.root, "a file at", r.Module, p, loc.target); err != nil {
			return err
		}
	}
	w, ours := fc.written[p]
	fr, wasFound := fc.found[p]
	want := []byte(f.Content)
	a := decideFile(fileFacts{ours: ours, wasFound: wasFound, exists: loc.exists,
		sameContent: loc.exists && bytes.Equal(loc.content, want), taken: taken, createOnce: f.CreateOnce})

	switch a.step {
	case fileObserveHeld:
		hf := report.HeldFile{Path: p, Module: r.Module, RecordedHash: fr.Hash, Since: fr.At}
		h.observeHeld(&hf, loc)
		if hf.Changed {
			h.log.Warn("held file "+hf.Reason, "path", p, "module", r.Module, "recorded", fr.Hash, "current", hf.CurrentHash)
		}
		fc.rep.Held = append(fc.rep.Held, hf)
		return nil
	case fileHold: // its original recorded before anything else, then held
		h.crash("hold.before-record-original")
		fr, err := h.recordFound(fc, r, loc)
		if err != nil {
			return err
		}
		h.crash("hold.after-record-original")
		h.log.Info("found file held", "path", p, "module", r.Module, "hash", fr.Hash)
		fc.rep.Held = append(fc.rep.Held, report.HeldFile{Path: p, Module: r.Module, RecordedHash: fr.Hash, CurrentHash: fr.Hash, Since: fr.At})
		return nil
	}
	if a.recordFound { // found on a take or on a converged node: recorded first, then replaced
		h.crash("take.before-record-original")
		if _, err := h.recordFound(fc, r, loc); err != nil {
			return err
		}
		h.crash("take.after-record-original")
	}
	if a.step == fileKeepOnce {
		hash := pass.HashOf(loc.content)
		fc.rep.Written = append(fc.rep.Written, report.WrittenFile{Path: p, Module: r.Module, Hash: hash, At: w.At, Kept: !ours || w.Hash != hash})
		return nil // written when missing, never rewritten
	}
	mode, err := fileMode(f.Mode)
	if err != nil {
		return err
	}
	owner, err := h.owner(f.Owner)
	if err != nil {
		return err
	}
	if a.step == fileFixMeta {
		return h.keepFile(fc, r, loc, w, mode, owner)
	}
	if a.stage {
		return h.stageWrite(fc, r, loc, want, mode, owner)
	}
	return h.writeFile(fc, r, loc, want, mode, owner, wasFound && !ours)
}

// keepFile keeps a file of the host's whose content is as declared: its mode and owner set if
// wrong, its record moved to the declaring module.
func (h *Host) keepFile(fc *fileCtx, r fsm.Resource, loc located, w writtenRecord, mode fs.FileMode, owner ids) error {
	p := r.File.Path
	if err := h.fixMeta(fc, p, loc, mode, owner); err != nil {
		return err
	}
	if w.Module != r.Module {
		w.Module = r.Module
		if err := h.st.putWritten(p, w); err != nil {
			return err
		}
		fc.rep.Changes++
	}
	fc.rep.Written = append(fc.rep.Written, report.WrittenFile{Path: p, Module: r.Module, Hash: w.Hash, At: w.At})
	return nil
}

// writeFile writes a declared file: the record first (so a file holding this hash is known as
// the host's after a crash), then the content, atomically.
func (h *Host) writeFile(fc *fileCtx, r fsm.Resource, loc located, want []byte, mode fs.FileMode, owner ids, replacesHeld bool) error {
	p := r.File.Path
	wantHash := pass.HashOf(want)
	w := writtenRecord{Module: r.Module, Hash: wantHash, At: time.Now().UTC()}
	if err := h.st.putWritten(p, w); err != nil {
		return err
	}
	fc.written[p] = w
	fc.rep.Changes++
	h.crash("take.after-record-written")
	if err := h.writeAtomic(loc.target, want, mode, owner); err != nil {
		return err
	}
	fc.rep.Changes++
	what := "file written"
	if replacesHeld {
		what = "held file replaced; its original is kept"
	}
	h.log.Info(what, "path", p, "module", r.Module, "hash", wantHash)
	fc.rep.Written = append(fc.rep.Written, report.WrittenFile{Path: p, Module: r.Module, Hash: wantHash, At: w.At})
	return nil
}

// recordFound durably records a found file's original before anything else happens to it.
func (h *Host) recordFound(fc *fileCtx, r fsm.Resource, loc located) (foundRecord, error) {
	fr := foundRecord{Module: r.Module, Hash: pass.HashOf(loc.content), Size: len(loc.content), At: time.Now().UTC()}
	if m, ok := metaOf(loc.info); ok {
		fr.Meta = &m
	}
	if err := h.st.putFound(r.File.Path, fr, loc.content); err != nil {
		return fr, err
	}
	fc.found[r.File.Path] = fr
	fc.rep.Changes++
	return fr, nil
}

func (h *Host) owner(s string) (ids, error) {
	if o, ok := h.owners[s]; ok {
		return o, nil
	}
	o, err := lookupOwner(s)
	if err != nil {
		return ids{}, err
	}
	h.owners[s] = o
	return o, nil
}

// fixMeta gives a file whose content is right its declared mode and owner, touching nothing when
// they are right already. Both are changed through a descriptor opened without following a
// symlink and checked to be the file examined (fchown, fchmod), never through the path again: a
// symlink swapped in after the check is refused, not followed.
func (h *Host) fixMeta(fc *fileCtx, p string, loc located, mode fs.FileMode, owner ids) error {
	got, ok := statIDs(loc.info)
	wrongOwner := ok && got != owner
	wrongMode := loc.info.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != mode
	if !wrongOwner && !wrongMode {
		return nil
	}
	h.seamReach("meta.before-change", loc.target)
	f, err := openFileNoFollow(loc.target, loc.info)
	if err != nil {
		return fmt.Errorf("cannot be given its mode and owner: %w", err)
	}
	defer f.Close()
	if wrongOwner {
		if err := f.Chown(owner.uid, owner.gid); err != nil {
			return fmt.Errorf("cannot be given owner %d:%d: %w", owner.uid, owner.gid, err)
		}
		fc.rep.Changes++
		h.log.Info("file owner set", "path", p, "uid", owner.uid, "gid", owner.gid)
	}
	if wrongMode {
		if err := f.Chmod(mode); err != nil {
			return fmt.Errorf("cannot be given mode %o: %w", mode, err)
		}
		fc.rep.Changes++
		h.log.Info("file mode set", "path", p, "mode", fmt.Sprintf("%#o", mode.Perm()))
	}
	return nil
}

// writeAtomic replaces target with data: a temporary file in the same directory, written, given
// its mode and owner and fsync'd, renamed over target, and the directory fsync'd. A crash leaves
// the old content or the new, never a mix or nothing. The directory is reached from the root one
// component at a time without following a symlink (missing ones created), and everything after
// happens relative to its descriptor, so nothing swapped into the path meanwhile is followed.
func (h *Host) writeAtomic(target string, data []byte, mode fs.FileMode, owner ids) error {
	dir, base := filepath.Dir(target), filepath.Base(target)
	h.seamReach("write.before-dir", dir)
	d, err := openDirBeneath(h.root, dir)
	if err != nil {
		return fmt.Errorf("cannot be written: its directory: %w", err)
	}
	defer d.Close()
	dfd := int(d.Fd())
	// Temporary files a crash left behind are the host's own; they go first.
	if names, err := d.Readdirnames(-1); err == nil {
		for _, n := range names {
			if strings.HasPrefix(n, tempPrefix(target)) {
				_ = unix.Unlinkat(dfd, n, 0)
			}
		}
	}
	tmpName := tempName(target)
	fd, err := unix.Openat(dfd, tmpName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("cannot be written: %s: %w", filepath.Join(dir, tmpName), err)
	}
	tmp := os.NewFile(uintptr(fd), filepath.Join(dir, tmpName))
	done := false
	defer func() {
		if !done {
			tmp.Close()
			_ = unix.Unlinkat(dfd, tmpName, 0)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("cannot be written: %w", err)
	}
	if err := tmp.Chown(owner.uid, owner.gid); err != nil {
		return fmt.Errorf("cannot be given owner %d:%d: %w", owner.uid, owner.gid, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("cannot be given mode %o: %w", mode, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("cannot be written: fsync: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cannot be written: %w", err)
	}
	h.crash("take.after-temp-write")
	if err := unix.Renameat(dfd, tmpName, dfd, base); err != nil {
		return fmt.Errorf("cannot be written: %w", err)
	}
	done = true
	h.crash("take.after-rename")
	if err := d.Sync(); err != nil {
		return fmt.Errorf("cannot be written: fsync of %s: %w", dir, err)
	}
	h.crash("take.after-dir-sync")
	return nil
}

// removeCreated removes a file the host created for a module no longer assigned, then its record.
func (h *Host) removeCreated(fc *fileCtx, p string, w writtenRecord) error {
	loc, err := locate(h.root, p)
	if err != nil {
		return err
	}
	if loc.exists {
		// Removed through its directory's descriptor, reached without following a symlink: a
		// directory swapped for a symlink since the look is refused, nothing outside is removed.
		h.seamReach("remove.before-dir", filepath.Dir(loc.target))
		d, err := openExistingDirBeneath(h.root, filepath.Dir(loc.target))
		if err != nil {
			return err
		}
		defer d.Close()
		if err := unix.Unlinkat(int(d.Fd()), filepath.Base(loc.target), 0); err != nil {
			return fmt.Errorf("cannot be removed: %w", err)
		}
		if err := d.Sync(); err != nil {
			return fmt.Errorf("fsync of %s: %w", filepath.Dir(loc.target), err)
		}
		fc.rep.Changes++
		h.crash("unassign.after-remove")
		h.log.Info("file removed: created for a module no longer assigned", "path", p, "module", w.Module)
	}
	if err := h.st.deleteWritten(p); err != nil {
		return err
	}
	delete(fc.written, p)
	fc.rep.Changes++
	return nil
}
