package agent

// What a take will replace, and what the host kept of what it replaced: the take preview a
// server works out from a node's latest report and the declaration the take would produce, and
// the original of a found container or a found file's record (mode, owner, latest bytes).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/host/preview"
	"meshd/report"
)

// takePreview serves what taking a module on a node will replace, changing nothing.
func (s *recordAPI) takePreview(w http.ResponseWriter, req *http.Request) {
	pv, err := s.takePreviewOf(req.Context(), req.PathValue("node"), req.PathValue("module"))
	var behind *preview.ReportBehindError
	switch {
	case req.Context().Err() != nil:
	case errors.As(err, &behind):
		api.WriteJSON(w, http.StatusConflict, api.ErrorBody{Error: err.Error()})
	case errors.Is(err, errNoTrial):
		writeErr(w, errors.Unwrap(err))
	case err != nil:
		writeErr(w, notFound(err.Error()))
	default:
		api.WriteJSON(w, http.StatusOK, pv)
	}
}

// errNoTrial wraps a take the record refuses, found while composing the trial declaration.
var errNoTrial = errors.New("the take is refused")

type trialError struct{ err error }

func (e trialError) Error() string   { return e.err.Error() }
func (e trialError) Unwrap() error   { return e.err }
func (e trialError) Is(t error) bool { return t == errNoTrial }

// takePreviewOf works out what taking module on node will replace: the declaration is composed
// on a copy of the record with the module taken (refused as the take itself would be), and read
// against the node's latest host report. Right after `module assign` the node's latest report
// may be of a pass that did not know of it yet, and right after its agent started there may be
// none: it waits a little for the pass that follows rather than preview from what is not there.
func (s *recordAPI) takePreviewOf(ctx context.Context, node, module string) (report.TakePreview, error) {
	var d *fsm.Declaration
	var err error
	s.rec.Read(func(r *fsm.Record, _ uint64) {
		var b []byte
		if b, err = r.Marshal(); err != nil {
			return
		}
		var trial *fsm.Record
		if trial, err = fsm.UnmarshalRecord(b); err != nil {
			return
		}
		var cmd []byte
		if cmd, err = fsm.Encode(fsm.OpModuleTake, time.Now(), fsm.ModuleOnNode{Node: node, Module: module}); err != nil {
			return
		}
		if _, err = fsm.Apply(trial, cmd); err != nil {
			return
		}
		d, err = fsm.Compose(trial, node)
	})
	if err != nil {
		return report.TakePreview{}, trialError{err}
	}
	deadline := time.Now().Add(reportBehindWait)
	for {
		pv, err := preview.Take(s.fleet.report(node), d, module)
		var behind *preview.ReportBehindError
		var none *preview.NoReportError
		if !(errors.As(err, &behind) || errors.As(err, &none)) || !time.Now().Before(deadline) {
			return pv, err
		}
		select {
		case <-ctx.Done():
			return pv, ctx.Err()
		case <-time.After(reportBehindPoll):
		}
	}
}

// lossesOfTake are what taking module on node loses, each naming its container, from the
// take preview; none when the preview cannot be made (no report yet: what the node holds is
// not known, and the host's own record of what it found stands).
func (s *recordAPI) lossesOfTake(ctx context.Context, node, module string) []string {
	pv, err := s.takePreviewOf(ctx, node, module)
	if err != nil {
		return nil
	}
	return pv.Losses()
}

// lossRefusal says a take is refused because it would lose what the found containers have.
func lossRefusal(node, module string, losses []string) string {
	return fmt.Sprintf("taking %s on %s would lose what its found containers have and the module does not declare:\n  %s\n"+
		"declare them in the module (meshd module take %s %s --preview lists each difference), or accept the loss: "+
		"meshd module take %s %s --accept-loss (recorded in the history, with who)",
		module, node, strings.Join(losses, "\n  "), node, module, node, module)
}

// reportBehindWait is how long a take preview waits for a report made after the module's
// assignment, or for the node's first (a pass is woken by the declaration at once; the node may
// be a client whose report comes over gossip), polled every reportBehindPoll.
const (
	reportBehindWait = 5 * time.Second
	reportBehindPoll = 50 * time.Millisecond
)

// getFoundRecord serves, for the node's own originals route, what the host kept of a found
// container (?container=NAME) or a found file's record (?path=P&show=record), or the latest
// bytes of a file a take replaced (?path=P&show=latest). It reports whether it handled req.
func (a *Agent) getFoundRecord(w http.ResponseWriter, req *http.Request) bool {
	q := req.URL.Query()
	name, ctr, show, path := req.PathValue("node"), q.Get("container"), q.Get("show"), q.Get("path")
	if ctr == "" && show == "" {
		return false
	}
	if name != a.node.Name {
		writeErr(w, notFound(fmt.Sprintf("node %s: what it found is kept on that node; run `meshd node original` there", name)))
		return true
	}
	var v any
	var err error
	switch {
	case ctr != "":
		v, err = a.host.ContainerFound(ctr)
	case show == "record":
		v, err = a.host.FileOriginal(path)
	case show == "latest":
		var b []byte
		if b, err = a.host.Latest(path); err == nil {
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(b)
			return true
		}
	default:
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: fmt.Sprintf("show=%s: give show=record or show=latest", show)})
		return true
	}
	if err != nil {
		writeErr(w, notFound(fmt.Sprintf("node %s: %v", name, err)))
		return true
	}
	api.WriteJSON(w, http.StatusOK, v)
	return true
}
