package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
)

// A token is "olt_<id>_<secret>": id (16 hex digits) names its record,
// secret (32 random bytes, base64url without padding) is what proves it.
// Only the secret's SHA-256 is stored.
const (
	tokenPrefix = "olt_"
	idLen       = 16
	secretLen   = 43 // base64url of 32 bytes, unpadded
)

// ErrMalformedToken says a string is not a token. The caller answers it as
// any other bad credential: nothing tells which part was wrong.
var ErrMalformedToken = errors.New("malformed token")

// Token is a parsed bearer token.
type Token struct {
	ID     string
	secret string
}

// NewToken makes a token with a fresh id and secret; the string is shown
// once to whoever created it.
func NewToken() (Token, string) {
	var id [8]byte
	var secret [32]byte
	if _, err := rand.Read(id[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	if _, err := rand.Read(secret[:]); err != nil {
		panic(err)
	}
	t := Token{ID: hex.EncodeToString(id[:]), secret: base64.RawURLEncoding.EncodeToString(secret[:])}
	return t, tokenPrefix + t.ID + "_" + t.secret
}

// ParseToken reads a token string (as sent after "Bearer ").
func ParseToken(s string) (Token, error) {
	rest, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok || len(rest) != idLen+1+secretLen || rest[idLen] != '_' {
		return Token{}, ErrMalformedToken
	}
	id, secret := rest[:idLen], rest[idLen+1:]
	if _, err := hex.DecodeString(id); err != nil || strings.ToLower(id) != id {
		return Token{}, ErrMalformedToken
	}
	if b, err := base64.RawURLEncoding.DecodeString(secret); err != nil || len(b) != 32 {
		return Token{}, ErrMalformedToken
	}
	return Token{ID: id, secret: secret}, nil
}

// Hash is the stored form of the token's secret.
func (t Token) Hash() string {
	sum := sha256.Sum256([]byte(t.secret))
	return hex.EncodeToString(sum[:])
}

// Matches reports, in constant time, whether the token's secret hashes to
// stored.
func (t Token) Matches(stored string) bool {
	return subtle.ConstantTimeCompare([]byte(t.Hash()), []byte(stored)) == 1
}

// ParseBearer takes the token out of an Authorization header value.
func ParseBearer(header string) (Token, error) {
	scheme, value, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return Token{}, ErrMalformedToken
	}
	return ParseToken(strings.TrimSpace(value))
}
