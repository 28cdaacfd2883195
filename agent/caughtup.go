package agent

import (
	"context"
	"net/http"
	"time"

	"meshd/api"
)

// caughtUp is what waits for the record to catch up with the log (record.Service).
type caughtUp interface {
	WaitCaughtUp(ctx context.Context) error
}

// caughtUpOnly holds every request until the record has caught up with the log.
func caughtUpOnly(rn caughtUp, next http.Handler) http.Handler {
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
