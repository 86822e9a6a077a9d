package auth

import (
	"strings"
	"testing"
	"time"
)

func TestATokenMatchesOnlyItsOwnHash(t *testing.T) {
	tok, text := NewToken()
	parsed, err := ParseToken(text)
	if err != nil || parsed.ID != tok.ID {
		t.Fatalf("ParseToken(%q) = %v, %v", text, parsed, err)
	}
	if !parsed.Matches(tok.Hash()) {
		t.Fatal("a token does not match its own hash")
	}
	other, _ := NewToken()
	if parsed.Matches(other.Hash()) || parsed.Matches("") {
		t.Fatal("a token matches another's hash")
	}
	if strings.Contains(tok.Hash(), tok.secret) {
		t.Fatal("the stored hash holds the secret")
	}
	bearer, err := ParseBearer("Bearer " + text)
	if err != nil || bearer != parsed {
		t.Fatalf("ParseBearer: %v, %v", bearer, err)
	}
	for _, bad := range []string{"", "Bearer", "Basic " + text, "Bearer olt_", text, "Bearer " + text + "x",
		"Bearer " + strings.Replace(text, "olt_", "olx_", 1), "Bearer olt_" + strings.Repeat("G", 16) + text[20:]} {
		if _, err := ParseBearer(bad); err == nil {
			t.Errorf("ParseBearer(%q) accepted", bad)
		}
	}
}

func TestRulesAllowWhatTheirEntriesName(t *testing.T) {
	rules := NewRules([]ACL{
		{Principal: "alice", Topic: "orders", Operation: Produce},
		{Principal: "alice", Topic: "audit.*", Operation: Read},
		{Principal: "*", Topic: "public", Operation: Read},
		{Principal: "root", Topic: "*", Operation: Admin},
		{Principal: "bob", Topic: "*", Operation: Read},
	})
	for _, tc := range []struct {
		principal string
		op        Operation
		topic     string
		want      bool
	}{
		{"alice", Produce, "orders", true},
		{"alice", Produce, "orders2", false},
		{"alice", Read, "orders", false},
		{"alice", Read, "audit.eu", true},
		{"alice", Read, "audit", false},
		{"alice", Read, "public", true},
		{"carol", Read, "public", true},
		{"carol", Produce, "public", false},
		{"root", Produce, "anything", true},
		{"root", Admin, "anything", true},
		{"bob", Read, "x", true},
		{"bob", Produce, "x", false},
		{"bob", Admin, "x", false},
	} {
		if got := rules.Allows(tc.principal, tc.op, tc.topic); got != tc.want {
			t.Errorf("Allows(%s, %s, %s) = %v", tc.principal, tc.op, tc.topic, got)
		}
	}
	if !rules.AllowsEverywhere("bob", Read) || rules.AllowsEverywhere("alice", Read) || !rules.AllowsEverywhere("root", Read) {
		t.Error("AllowsEverywhere is wrong")
	}
	if (Rules{}).Allows("root", Admin, "x") {
		t.Error("empty rules allow something")
	}
}

func TestValidateRefusesBadEntries(t *testing.T) {
	for _, bad := range []ACL{
		{Principal: "a", Topic: "t", Operation: "write"},
		{Principal: "", Topic: "t", Operation: Read},
		{Principal: "a", Topic: "", Operation: Read},
		{Principal: "a", Topic: "a*b", Operation: Read},
		{Principal: "a*", Topic: "t", Operation: Read},
		{Principal: "a\n", Topic: "t", Operation: Read},
		{Principal: strings.Repeat("a", 257), Topic: "t", Operation: Read},
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
	if err := (ACL{Principal: "a", Topic: "orders.*", Operation: Produce}).Validate(); err != nil {
		t.Error(err)
	}
}

// FuzzParseBearer: no input panics, and what parses renders back to the
// same token.
func FuzzParseBearer(f *testing.F) {
	_, text := NewToken()
	for _, s := range []string{"Bearer " + text, "bearer " + text, "Bearer olt_", "Bearer  " + text, "Basic x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		tok, err := ParseBearer(header)
		if err != nil {
			return
		}
		again, err := ParseToken(tokenPrefix + tok.ID + "_" + tok.secret)
		if err != nil || again != tok {
			t.Fatalf("%q parsed as %v, which does not parse back: %v", header, tok, err)
		}
		if !tok.Matches(tok.Hash()) {
			t.Fatal("a parsed token does not match its hash")
		}
	})
}

// FuzzACL: a valid entry with an exact topic allows its operation on that
// topic and on no other; validation never panics.
func FuzzACL(f *testing.F) {
	f.Add("alice", "orders", "produce", "orders2")
	f.Add("*", "audit.*", "read", "audit.eu")
	f.Add("root", "*", "admin", "")
	f.Add("a*", "a*b", "write", "x")
	f.Fuzz(func(t *testing.T, principal, topic, op, other string) {
		a := ACL{Principal: principal, Topic: topic, Operation: Operation(op)}
		if a.Validate() != nil {
			return
		}
		rules := NewRules([]ACL{a})
		name := principal
		if name == "*" {
			name = "someone"
		}
		concrete := strings.TrimSuffix(topic, "*") + "x"
		if !rules.Allows(name, a.Operation, concrete) && topic != concrete {
			if strings.HasSuffix(topic, "*") {
				t.Fatalf("%+v does not allow %q", a, concrete)
			}
		}
		if !strings.HasSuffix(topic, "*") {
			if !rules.Allows(name, a.Operation, topic) {
				t.Fatalf("%+v does not allow its own topic", a)
			}
			if other != topic && a.Operation != Admin && rules.Allows(name, a.Operation, other) {
				t.Fatalf("%+v allows %q", a, other)
			}
		}
	})
}

func TestALimiterHoldsAPrincipalToItsRate(t *testing.T) {
	l := NewLimiter()
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	q := Quota{ProduceBytesPerSec: 1000}
	passed := 0
	for range 100 { // 10 s at 100 calls of 100 bytes per second
		for range 10 {
			if _, ok := l.Produce("abuser", q, 100); ok {
				passed += 100
			}
		}
		now = now.Add(100 * time.Millisecond)
	}
	if passed < 9000 || passed > 11100 {
		t.Fatalf("%d bytes passed in 10 s at 1000 B/s", passed)
	}
	if _, ok := l.Produce("other", q, 100); !ok {
		t.Fatal("another principal is held by the abuser's bucket")
	}
	if _, ok := l.Read("abuser", q, 1<<20); !ok {
		t.Fatal("a read is held without a read quota")
	}
	wait, ok := l.Produce("abuser", q, 5000)
	if ok {
		wait, ok = l.Produce("abuser", q, 1)
	}
	if ok || wait <= 0 || wait > 6*time.Second {
		t.Fatalf("an empty bucket: ok %v, wait %v", ok, wait)
	}
}

// TestReadsAreChargedEvenInDebt: bytes already sent always count, so a
// stream that waits as told moves at its quota, not twice it.
func TestReadsAreChargedEvenInDebt(t *testing.T) {
	l := NewLimiter()
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	q := Quota{ReadBytesPerSec: 100_000}
	sent := 0
	start := now
	for now.Sub(start) < 20*time.Second {
		sent += 10_000
		if wait, _ := l.Read("reader", q, 10_000); wait > 0 {
			now = now.Add(wait)
		}
	}
	rate := float64(sent) / now.Sub(start).Seconds()
	if rate > 115_000 {
		t.Fatalf("a reader that waits as told moved %.0f B/s under a 100000 B/s quota", rate)
	}
}
