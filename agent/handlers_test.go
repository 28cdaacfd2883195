package agent

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"meshd/api"
)

// An error naming a missing thing answers 404 with the agent's message as the API's error body,
// which the CLI's client prints as it is (api's TestClientAnswersOverTheSocket).
func TestWriteErrNotFound(t *testing.T) {
	rec := httptest.NewRecorder()
	writeErr(rec, notFound("module web: not in the catalogue"))
	var body api.ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusNotFound ||
		body.Error != "module web: not in the catalogue" {
		t.Fatalf("got %d %q (%v)", rec.Code, rec.Body.String(), err)
	}
}
