package apierr

import (
	"encoding/json"
	"net/http"
)

// httpBody is the JSON shape of every HTTP error answer.
type httpBody struct {
	Error struct {
		Code      Code              `json:"code"`
		Class     Class             `json:"class"`
		Message   string            `json:"message"`
		Retryable bool              `json:"retryable"`
		Details   map[string]string `json:"details,omitempty"`
	} `json:"error"`
}

// WriteHTTP answers an HTTP request with err, mapped through the catalogue.
func WriteHTTP(w http.ResponseWriter, err error) {
	apiErr := As(err)
	var body httpBody
	body.Error.Code = apiErr.Code
	body.Error.Class = apiErr.Class()
	body.Error.Message = apiErr.Message
	body.Error.Retryable = apiErr.Class() == ClassRetry
	body.Error.Details = apiErr.Details
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(apiErr.HTTPStatus())
	_ = json.NewEncoder(w).Encode(body)
}
