package agent

// The converge preview a server works out for any node, changing nothing: the node's
// declaration composed from the record, read against what its latest host report saw
// listening and published (host.PreviewConverge). The flip itself is not built yet (issue 13).

import (
	"net/http"

	"meshd/fsm"
	"meshd/host"
)

// convergePreview serves `meshd converge NODE --preview`.
func (s *serverRole) convergePreview(w http.ResponseWriter, req *http.Request) {
	node := req.PathValue("node")
	var d *fsm.Declaration
	var err error
	s.fsm.Read(func(r *fsm.Record, _ uint64) {
		d, err = fsm.Compose(r, node)
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	pv, err := host.PreviewConverge(s.report(node), d)
	if err != nil {
		writeErr(w, notFound(err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, pv)
}
