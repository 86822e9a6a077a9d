package consumer

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"orderlog/ingest/httpapi"
	"orderlog/internal/apierr"
)

// groupsPrefix holds every group's keys.
const groupsPrefix = "orderlog/groups/"

// Group and topic names are path-escaped in keys, so no name can reach
// into another group's keys.
func groupPrefix(group string) string   { return groupsPrefix + url.PathEscape(group) + "/" }
func membersPrefix(group string) string { return groupPrefix(group) + "members/" }
func memberKey(group, id string) string { return membersPrefix(group) + url.PathEscape(id) }
func stateKey(group string) string      { return groupPrefix(group) + "state" }
func offsetsPrefix(group string) string { return groupPrefix(group) + "offsets/" }

func offsetKey(group, topic string, p uint32) string {
	return offsetsPrefix(group) + url.PathEscape(topic) + "/" + fmt.Sprintf("%05d", p)
}

// parseOffsetKey is the topic and partition of an offset key of group.
func parseOffsetKey(group, key string) (string, uint32, bool) {
	rest, ok := strings.CutPrefix(key, offsetsPrefix(group))
	if !ok {
		return "", 0, false
	}
	escaped, num, ok := strings.Cut(rest, "/")
	if !ok {
		return "", 0, false
	}
	topic, err := url.PathUnescape(escaped)
	if err != nil {
		return "", 0, false
	}
	p, err := strconv.ParseUint(num, 10, 32)
	return topic, uint32(p), err == nil
}

// groupOfKey is the group whose key this is (for listing groups).
func groupOfKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, groupsPrefix)
	if !ok {
		return "", false
	}
	escaped, _, ok := strings.Cut(rest, "/")
	if !ok {
		return "", false
	}
	group, err := url.PathUnescape(escaped)
	return group, err == nil
}

// ValidateGroupName accepts 1 to httpapi.MaxGroupNameBytes bytes of UTF-8
// without control characters.
func ValidateGroupName(name string) error {
	switch {
	case name == "":
		return apierr.New(apierr.InvalidArgument, "consumer group name is required")
	case len(name) > httpapi.MaxGroupNameBytes:
		return apierr.New(apierr.InvalidArgument, "consumer group name of %d bytes exceeds %d", len(name), httpapi.MaxGroupNameBytes)
	case !utf8.ValidString(name):
		return apierr.New(apierr.InvalidArgument, "consumer group name is not UTF-8")
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f {
			return apierr.New(apierr.InvalidArgument, "consumer group name has control character %U", c)
		}
	}
	return nil
}
