package schema

import (
	"fmt"

	"orderlog/internal/apierr"
)

// errInvalid is an INVALID_SCHEMA error: the text does not parse in its format.
func errInvalid(format Format, err error) error {
	return apierr.New(apierr.InvalidSchema, "invalid %s schema: %v", format, err)
}

// IncompatibleError says why a schema was refused: the version it was
// checked against, the direction, and the incompatibility found.
type IncompatibleError struct {
	Version  int    // the existing version it conflicts with
	Backward bool   // true: the new schema cannot read the version's data; false: the version cannot read the new schema's data
	Reason   string // in reader/writer terms
}

func (e *IncompatibleError) Error() string {
	if e.Backward {
		return fmt.Sprintf("not backward compatible with version %d (the new schema, as reader, must read data written with it): %s", e.Version, e.Reason)
	}
	return fmt.Sprintf("not forward compatible with version %d (it, as reader, must read data written with the new schema): %s", e.Version, e.Reason)
}

// apiError maps an IncompatibleError to the API's INCOMPATIBLE_SCHEMA.
func (e *IncompatibleError) apiError() *apierr.Error {
	return apierr.New(apierr.IncompatibleSchema, "%s", e.Error())
}
