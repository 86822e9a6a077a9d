package httpapi

import "orderlog/internal/apierr"

// MaxTopicNameLength bounds topic names; they become Parquet partition paths.
const MaxTopicNameLength = 200

// ValidateTopicName accepts names that are safe as a path segment and in a
// Hive partition: letters, digits, '.', '_' and '-', not starting with '.'.
func ValidateTopicName(name string) error {
	if name == "" || len(name) > MaxTopicNameLength || name[0] == '.' {
		return apierr.New(apierr.InvalidArgument, "topic name must be 1-%d characters and not start with '.'", MaxTopicNameLength)
	}
	for _, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return apierr.New(apierr.InvalidArgument, "topic name %q has %q; use letters, digits, '.', '_' and '-'", name, c)
		}
	}
	return nil
}
