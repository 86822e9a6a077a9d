package auth

import (
	"fmt"
	"slices"
	"strings"
)

// Operation is what an ACL entry allows on the topics it names.
type Operation string

const (
	// Produce: log messages to the topic.
	Produce Operation = "produce"
	// Read: read, tail, query and consume the topic (and commit a
	// consumer group's offsets in it).
	Read Operation = "read"
	// Admin: create topics and manage credentials; an entry for "*" makes
	// a principal an administrator of the cluster.
	Admin Operation = "admin"
)

// ParseOperation reads an operation name.
func ParseOperation(s string) (Operation, error) {
	switch op := Operation(strings.ToLower(s)); op {
	case Produce, Read, Admin:
		return op, nil
	}
	return "", fmt.Errorf("operation %q: use produce, read or admin", s)
}

// ACL is one entry: Principal may do Operation on the topics Topic
// matches. Topic is a name, a prefix ending in "*" ("orders.*"), or "*"
// (every topic). Principal is a principal name or "*" (every
// authenticated principal).
type ACL struct {
	Principal string    `json:"principal"`
	Topic     string    `json:"topic"`
	Operation Operation `json:"operation"`
}

// MaxPatternBytes bounds a principal or topic pattern.
const MaxPatternBytes = 256

// Validate checks an entry.
func (a ACL) Validate() error {
	if _, err := ParseOperation(string(a.Operation)); err != nil {
		return err
	}
	for what, v := range map[string]string{"principal": a.Principal, "topic": a.Topic} {
		switch {
		case v == "" || len(v) > MaxPatternBytes:
			return fmt.Errorf("an ACL's %s must be 1-%d bytes", what, MaxPatternBytes)
		case strings.ContainsAny(v, "\x00\n\r"):
			return fmt.Errorf("an ACL's %s has a control character", what)
		}
	}
	if i := strings.IndexByte(a.Topic, '*'); i >= 0 && i != len(a.Topic)-1 {
		return fmt.Errorf("topic pattern %q: '*' may only end it", a.Topic)
	}
	if strings.Contains(a.Principal, "*") && a.Principal != "*" {
		return fmt.Errorf("principal %q: use a name or '*'", a.Principal)
	}
	return nil
}

// matchesTopic reports whether the entry's pattern covers topic.
func (a ACL) matchesTopic(topic string) bool {
	if prefix, ok := strings.CutSuffix(a.Topic, "*"); ok {
		return strings.HasPrefix(topic, prefix)
	}
	return a.Topic == topic
}

// coversAll reports whether the entry's pattern covers every topic.
func (a ACL) coversAll() bool { return a.Topic == "*" }

// Rules is a set of ACL entries; the zero Rules allows nothing.
type Rules struct{ entries []ACL }

// NewRules returns the rules of these entries.
func NewRules(entries []ACL) Rules { return Rules{entries: slices.Clone(entries)} }

// Entries returns the entries, in the order given.
func (r Rules) Entries() []ACL { return slices.Clone(r.entries) }

// Allows reports whether principal may do op on topic. Admin on "*"
// allows everything.
func (r Rules) Allows(principal string, op Operation, topic string) bool {
	for _, a := range r.entries {
		if a.Principal != principal && a.Principal != "*" {
			continue
		}
		if (a.Operation == op && a.matchesTopic(topic)) || (a.Operation == Admin && a.coversAll()) {
			return true
		}
	}
	return false
}

// AllowsEverywhere reports whether principal may do op on every topic,
// present and future (a read without a topic filter needs it).
func (r Rules) AllowsEverywhere(principal string, op Operation) bool {
	for _, a := range r.entries {
		if (a.Principal == principal || a.Principal == "*") && a.coversAll() && (a.Operation == op || a.Operation == Admin) {
			return true
		}
	}
	return false
}
