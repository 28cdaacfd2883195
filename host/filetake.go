package host

// The file side of a staged take (see "A take is staged" in the package doc): a write that
// replaces a found file is rendered and the file's latest bytes, mode and owner recorded beside
// its original; it is written at the module's cutover, after the module's containers; when a
// container of the module failed nothing is written; when a write fails, the module's files
// already written are put back from what was recorded and the drivers step the module back.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"time"

	"meshd/fsm"
	"meshd/host/pass"
	"meshd/report"
)

// stagedWrite is one rendered write waiting for its module's cutover.
type stagedWrite struct {
	r     fsm.Resource
	loc   located
	want  []byte
	mode  fs.FileMode
	owner ids
}

// stepBacker is a driver that can put back what its cutover of a module replaced this pass
// (ContainerDriver).
type stepBacker interface {
	StepBack(ctx context.Context, pass pass.Pass, module string) error
}

// metaOf is a file's mode and owner as the record store keeps them.
func metaOf(fi fs.FileInfo) (fileMeta, bool) {
	if fi == nil {
		return fileMeta{}, false
	}
	o, ok := statIDs(fi)
	if !ok {
		return fileMeta{}, false
	}
	return fileMeta{Mode: uint32(fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)), UID: o.uid, GID: o.gid}, true
}

// stageWrite records the latest bytes of a found file a take will replace, then stages its write.
func (h *Host) stageWrite(fc *fileCtx, r fsm.Resource, loc located, want []byte, mode fs.FileMode, owner ids) error {
	p := r.File.Path
	fr := fc.found[p]
	meta, _ := metaOf(loc.info)
	fr.Latest = &latestRecord{Hash: pass.HashOf(loc.content), Size: len(loc.content), Meta: meta, At: time.Now().UTC()}
	h.crash("take.before-record-latest")
	if err := h.st.putLatest(p, fr, loc.content); err != nil {
		return err
	}
	fc.found[p] = fr
	fc.rep.Changes++
	h.crash("take.after-record-latest")
	fc.staged[r.Module] = append(fc.staged[r.Module], stagedWrite{r: r, loc: loc, want: want, mode: mode, owner: owner})
	return nil
}

// cutoverFiles writes the staged files, module by module, once the drivers have cut the
// module's other resources over; blocked names the modules a container failed for, and why.
func (h *Host) cutoverFiles(ctx context.Context, fc *fileCtx, blocked map[string]string, byKind map[string][]fsm.Resource) {
	for _, module := range slices.Sorted(maps.Keys(fc.staged)) {
		ws := fc.staged[module]
		if why, ok := blocked[module]; ok {
			for _, w := range ws {
				h.fail(fc, w.r, fmt.Errorf("is left as it was: the take of module %s did not cut over: %s", module, why))
				h.reportHeldStill(fc, w)
			}
			continue
		}
		h.crash("take.before-write-files")
		var done []stagedWrite
		for _, w := range ws {
			if err := h.writeFile(fc, w.r, w.loc, w.want, w.mode, w.owner, true); err != nil {
				back := errors.Join(h.putBackFiles(fc, append(done, w)), h.stepBackDrivers(ctx, module, byKind))
				err = fmt.Errorf("%w; the take of module %s was stepped back, what was found put back", err, module)
				if back != nil {
					err = fmt.Errorf("%w, but not all of it: %v", err, back)
				}
				h.fail(fc, w.r, err)
				break
			}
			done = append(done, w)
		}
	}
}

// putBackFiles restores files a failed cutover wrote from the latest bytes, mode and owner
// recorded before it, and drops their written records: they are held again.
func (h *Host) putBackFiles(fc *fileCtx, ws []stagedWrite) error {
	var errs []error
	for _, w := range ws {
		p := w.r.File.Path
		b, ok, err := h.st.latest(p)
		fr := fc.found[p]
		if err != nil || !ok || fr.Latest == nil {
			errs = append(errs, fmt.Errorf("file %s: no latest bytes recorded to put back: %v", p, err))
			continue
		}
		m := fr.Latest.Meta
		// A write that failed before its rename left the file as it was: only its record goes.
		if loc, err := locate(h.root, p); err != nil || !loc.exists || pass.HashOf(loc.content) != fr.Latest.Hash {
			if err := h.writeAtomic(w.loc.target, b, fs.FileMode(m.Mode), ids{m.UID, m.GID}); err != nil {
				errs = append(errs, fmt.Errorf("file %s: putting back its latest bytes: %w", p, err))
				continue
			}
		} else if err := h.fixMeta(fc, p, loc, fs.FileMode(m.Mode), ids{m.UID, m.GID}); err != nil {
			errs = append(errs, fmt.Errorf("file %s: putting back its mode and owner: %w", p, err))
			continue
		}
		if err := h.st.deleteWritten(p); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(fc.written, p)
		fc.rep.Changes++
		fc.rep.Written = slices.DeleteFunc(fc.rep.Written, func(x report.WrittenFile) bool { return x.Path == p })
		h.reportHeldStill(fc, w)
		h.log.Warn("take stepped back: file put back as it was", "path", p, "module", w.r.Module)
	}
	return errors.Join(errs...)
}

// reportHeldStill reports a staged file its take did not replace as held.
func (h *Host) reportHeldStill(fc *fileCtx, w stagedWrite) {
	p := w.r.File.Path
	fr := fc.found[p]
	hf := report.HeldFile{Path: p, Module: w.r.Module, RecordedHash: fr.Hash, Since: fr.At}
	if loc, err := locate(h.root, p); err == nil {
		h.observeHeld(&hf, loc)
	}
	fc.rep.Held = append(fc.rep.Held, hf)
}

// stepBackDrivers asks every driver that can to put back what it cut over for module this pass.
func (h *Host) stepBackDrivers(ctx context.Context, module string, byKind map[string][]fsm.Resource) error {
	var errs []error
	for _, drv := range h.drivers {
		if sb, ok := drv.(stepBacker); ok {
			pass := pass.Pass{Resources: byKind[drv.Kind()], Records: h.records(drv.Kind())}
			errs = append(errs, sb.StepBack(context.WithoutCancel(ctx), pass, module))
		}
	}
	return errors.Join(errs...)
}
