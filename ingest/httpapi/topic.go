package httpapi

import "orderlog/internal/apierr"

// DefaultTopic is the topic of a message that names none (HTTP and gRPC
// alike). It is created on first use like any topic, with the default
// partition count; reads and partition listings of it create it too.
const DefaultTopic = "default"

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
