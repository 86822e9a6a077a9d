package schema

import (
	"errors"
	"net/http"
	"strconv"

	"orderlog/internal/apierr"
)

// subjects lists the subjects read is allowed on.
func (h *handler) subjects(r *http.Request) (any, error) {
	all, err := h.reg.Subjects(r.Context())
	if err != nil {
		return nil, err
	}
	allowed := make([]string, 0, len(all))
	for _, subject := range all {
		err := h.authorize(r.Context(), ReadAccess, subject)
		if err == nil {
			allowed = append(allowed, subject)
		} else if apierr.As(err).Code != apierr.PermissionDenied {
			return nil, err
		}
	}
	return allowed, nil
}

func (h *handler) versions(r *http.Request) (any, error) {
	if err := h.authorize(r.Context(), ReadAccess, r.PathValue("subject")); err != nil {
		return nil, err
	}
	versions, err := h.reg.Versions(r.Context(), r.PathValue("subject"))
	if err != nil {
		return nil, err
	}
	numbers := make([]int, len(versions))
	for i, v := range versions {
		numbers[i] = v.Version
	}
	return numbers, nil
}

func (h *handler) register(r *http.Request) (any, error) {
	if err := h.authorize(r.Context(), WriteAccess, r.PathValue("subject")); err != nil {
		return nil, err
	}
	format, text, err := readSchema(r)
	if err != nil {
		return nil, err
	}
	v, err := h.reg.Register(r.Context(), r.PathValue("subject"), format, text)
	if err != nil {
		return nil, err
	}
	return map[string]int64{"id": v.ID}, nil
}

func (h *handler) lookup(r *http.Request) (any, error) {
	if err := h.authorize(r.Context(), ReadAccess, r.PathValue("subject")); err != nil {
		return nil, err
	}
	format, text, err := readSchema(r)
	if err != nil {
		return nil, err
	}
	v, err := h.reg.Lookup(r.Context(), r.PathValue("subject"), format, text)
	if err != nil {
		return nil, err
	}
	return answerOf(v), nil
}

func (h *handler) getVersion(r *http.Request) (Version, error) {
	if err := h.authorize(r.Context(), ReadAccess, r.PathValue("subject")); err != nil {
		return Version{}, err
	}
	version, err := parseVersion(r)
	if err != nil {
		return Version{}, err
	}
	return h.reg.Get(r.Context(), r.PathValue("subject"), version)
}

func (h *handler) version(r *http.Request) (any, error) {
	v, err := h.getVersion(r)
	if err != nil {
		return nil, err
	}
	return answerOf(v), nil
}

func (h *handler) versionText(r *http.Request) (any, error) {
	v, err := h.getVersion(r)
	if err != nil {
		return nil, err
	}
	return rawText(v.Text), nil
}

func (h *handler) byID(r *http.Request) (any, error) {
	if err := h.authorize(r.Context(), ReadAccess, ""); err != nil {
		return nil, err
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return nil, &httpError{http.StatusNotFound, codeSchemaNotFound, "Schema " + r.PathValue("id") + " not found"}
	}
	v, err := h.reg.ByID(r.Context(), id)
	if err != nil {
		return nil, err
	}
	a := answerOf(v)
	return struct {
		SchemaType Format `json:"schemaType,omitempty"`
		Schema     string `json:"schema"`
	}{a.SchemaType, a.Schema}, nil
}

// compatibility answers {"is_compatible": false} (200) for an
// incompatible schema, as Confluent does, with the reason in messages
// when ?verbose=true.
func (h *handler) compatibility(r *http.Request) (any, error) {
	if err := h.authorize(r.Context(), ReadAccess, r.PathValue("subject")); err != nil {
		return nil, err
	}
	version, err := parseVersion(r)
	if err != nil {
		return nil, err
	}
	format, text, err := readSchema(r)
	if err != nil {
		return nil, err
	}
	err = h.reg.CheckCompatibility(r.Context(), r.PathValue("subject"), version, format, text)
	var incompatible *IncompatibleError
	if errors.As(err, &incompatible) {
		answer := map[string]any{"is_compatible": false}
		if r.URL.Query().Get("verbose") == "true" {
			answer["messages"] = []string{incompatible.Error()}
		}
		return answer, nil
	}
	if err != nil {
		return nil, err
	}
	return map[string]bool{"is_compatible": true}, nil
}

// getLevel answers a subject's own level; one without falls back to the
// global level only with ?defaultToGlobal=true, else 40408 as Confluent.
func (h *handler) getLevel(r *http.Request) (any, error) {
	if err := h.authorize(r.Context(), ReadAccess, r.PathValue("subject")); err != nil {
		return nil, err
	}
	subject := r.PathValue("subject")
	level, err := h.reg.Level(r.Context(), subject)
	if err != nil {
		return nil, err
	}
	if level == "" && r.URL.Query().Get("defaultToGlobal") == "true" {
		level, err = h.reg.Level(r.Context(), "")
		if err != nil {
			return nil, err
		}
	}
	validation := ValidateNone
	if subject != "" { // orderlog's own field: what produce checks of the topic
		if validation, err = h.reg.Validation(r.Context(), subject); err != nil {
			return nil, err
		}
	}
	if level == "" && validation != ValidateNone {
		// A subject with only a validation mode set: it answers (or its
		// mode would not be seen), with the level it is held to.
		if level, err = h.reg.Level(r.Context(), ""); err != nil {
			return nil, err
		}
	}
	if level == "" {
		return nil, &httpError{http.StatusNotFound, codeSubjectLevelNotSet,
			"Subject '" + subject + "' does not have subject-level compatibility configured"}
	}
	answer := map[string]string{"compatibilityLevel": string(level)}
	if subject != "" {
		answer["validation"] = string(validation)
	}
	return answer, nil
}

// putLevel sets a subject's compatibility level, or with orderlog's own
// field "validation", what produce checks of the topic; either may be
// left out, not both.
func (h *handler) putLevel(r *http.Request) (any, error) {
	if err := h.authorize(r.Context(), WriteAccess, r.PathValue("subject")); err != nil {
		return nil, err
	}
	var req struct {
		Compatibility string `json:"compatibility"`
		Validation    string `json:"validation"`
	}
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	subject := r.PathValue("subject")
	answer := map[string]string{}
	if req.Validation != "" {
		if subject == "" {
			return nil, apierr.New(apierr.InvalidArgument, "validation is set per subject (topic), not globally")
		}
		v, err := ParseValidation(req.Validation)
		if err != nil {
			return nil, err
		}
		answer["validation"] = string(v)
	}
	if req.Compatibility != "" || req.Validation == "" {
		level, err := ParseLevel(req.Compatibility)
		if err != nil {
			return nil, &httpError{http.StatusUnprocessableEntity, codeInvalidLevel, "Invalid compatibility level: " + req.Compatibility}
		}
		if err := h.reg.SetLevel(r.Context(), subject, level); err != nil {
			return nil, err
		}
		answer["compatibility"] = string(level)
	}
	if v, ok := answer["validation"]; ok {
		if err := h.reg.SetValidation(r.Context(), subject, Validation(v)); err != nil {
			return nil, err
		}
	}
	return answer, nil
}
