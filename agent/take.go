package agent

// What a take will replace, and what the host kept of what it replaced: the take preview a
// server works out from a node's latest report and the declaration the take would produce, and
// the original of a found container or a found file's record (mode, owner, latest bytes).

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/host/preview"
)

// takePreview serves what taking a module on a node will replace, changing nothing: the
// declaration is composed on a copy of the record with the module taken (refused as the take
// itself would be), and read against the node's latest host report.
func (s *recordAPI) takePreview(w http.ResponseWriter, req *http.Request) {
	node, module := req.PathValue("node"), req.PathValue("module")
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
		writeErr(w, err)
		return
	}
	// Right after `module assign` the node's latest report may be of a pass that did not know
	// of it yet, and right after its agent started there may be none: wait a little for the
	// pass that follows rather than preview from what is not there.
	deadline := time.Now().Add(reportBehindWait)
	for {
		pv, err := preview.Take(s.fleet.report(node), d, module)
		var behind *preview.ReportBehindError
		var none *preview.NoReportError
		switch {
		case (errors.As(err, &behind) || errors.As(err, &none)) && time.Now().Before(deadline):
			select {
			case <-req.Context().Done():
				return
			case <-time.After(reportBehindPoll):
			}
			continue
		case behind != nil:
			api.WriteJSON(w, http.StatusConflict, api.ErrorBody{Error: err.Error()})
		case err != nil:
			writeErr(w, notFound(err.Error()))
		default:
			api.WriteJSON(w, http.StatusOK, pv)
		}
		return
	}
}

// reportBehindWait is how long a take preview waits for a report made after the module's
// assignment (or for the node's first report) (a pass is woken by the declaration at once; the node may be a client whose report
// comes over gossip), polled every reportBehindPoll.
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
