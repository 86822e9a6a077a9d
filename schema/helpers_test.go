package schema

import "orderlog/internal/apierr"

func apiCode(err error) apierr.Code {
	if err == nil {
		return ""
	}
	return apierr.As(err).Code
}
