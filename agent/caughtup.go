package agent

import (
	"context"
	"net/http"
	"time"

	"meshd/agent/raftnode"
	"meshd/api"
)

// caughtUpOnly holds every request until the record has caught up with the log.
func caughtUpOnly(rn *raftnode.Node, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), 30*time.Second)
		err := rn.WaitCaughtUp(ctx)
		cancel()
		if err != nil {
			api.WriteJSON(w, http.StatusServiceUnavailable, api.ErrorBody{Error: err.Error()})
			return
		}
		next.ServeHTTP(w, req)
	})
}
