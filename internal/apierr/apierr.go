// Package apierr is orderlog's one catalogue of API errors. Every error a
// client can see has a stable machine-readable code, a class that tells the
// client whether to retry, fix its request, or report a server fault, and is
// mapped here — and only here — to a gRPC status code and an HTTP status.
//
// Codes are part of the public API: never rename or reuse one.
package apierr

import (
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Code is a stable, machine-readable error code.
type Code string

// Class tells a client what to do about an error.
type Class string

const (
	// ClassRetry: the request was fine; retry it (with the same producer seq).
	ClassRetry Class = "retry"
	// ClassClient: the request is wrong; retrying it unchanged fails again.
	ClassClient Class = "client"
	// ClassServer: orderlog failed; report it.
	ClassServer Class = "server"
)

// The catalogue. Keep it sorted by class, then name.
const (
	Unavailable            Code = "UNAVAILABLE"               // no leader, store unreachable, shutting down
	Timeout                Code = "TIMEOUT"                   // the outcome is unknown; retry with the same seq
	DiskFull               Code = "DISK_FULL"                 // the node's WAL disk is above its high-water mark; nothing was logged
	IdempotencyKeyInFlight Code = "IDEMPOTENCY_KEY_IN_FLIGHT" // the first request with this key has no outcome yet; retry later
	InvalidArgument        Code = "INVALID_ARGUMENT"          // malformed field values
	MalformedRequest       Code = "MALFORMED_REQUEST"         // undecodable protobuf/JSON body
	MessageTooLarge        Code = "MESSAGE_TOO_LARGE"         // one message over the configured limit
	BatchTooLarge          Code = "BATCH_TOO_LARGE"           // a request frame over the configured limit
	LimitTooLarge          Code = "LIMIT_TOO_LARGE"           // a read limit over the configured maximum
	IdempotencyKeyReused   Code = "IDEMPOTENCY_KEY_REUSED"    // the key names a request with another body; nothing was logged
	OffsetOutOfRange       Code = "OFFSET_OUT_OF_RANGE"       // an offset at or beyond C, or below retention
	OutOfOrderSequence     Code = "OUT_OF_ORDER_SEQUENCE"
	ProducerFenced         Code = "PRODUCER_FENCED" // a newer epoch of the producer exists
	UnknownProducer        Code = "UNKNOWN_PRODUCER"
	ProducerExpired        Code = "PRODUCER_EXPIRED" // idle past the expiry: InitProducer again
	UnknownTopic           Code = "UNKNOWN_TOPIC"
	TopicExists            Code = "TOPIC_EXISTS"
	StaleGeneration        Code = "STALE_GENERATION" // a group commit from a generation the group has left behind
	NotAssigned            Code = "NOT_ASSIGNED"     // a group commit for a partition not assigned to the member
	UnknownGroup           Code = "UNKNOWN_GROUP"
	InvalidSchema          Code = "INVALID_SCHEMA"         // schema text that does not parse in its format
	IncompatibleSchema     Code = "INCOMPATIBLE_SCHEMA"    // a schema version the subject's compatibility level refuses
	UnknownSubject         Code = "UNKNOWN_SUBJECT"        // no schema subject of that name
	UnknownSchemaVersion   Code = "UNKNOWN_SCHEMA_VERSION" // the subject has no such version
	UnknownSchema          Code = "UNKNOWN_SCHEMA"         // no schema with that id, or not under that subject
	SchemaMismatch         Code = "SCHEMA_MISMATCH"        // a message the topic's strict schema validation refuses
	QuotaExceeded          Code = "QUOTA_EXCEEDED"         // the principal is over its bytes/s quota; retry after retry_after_ms
	LimitExceeded          Code = "LIMIT_EXCEEDED"         // the principal or address holds as many streams, connections or producer sessions as it may; retry after retry_after_ms (once one ends, or a producer session goes idle)
	Unauthenticated        Code = "UNAUTHENTICATED"        // no credentials, or bad ones (nothing says which)
	PermissionDenied       Code = "PERMISSION_DENIED"      // the principal lacks the ACL for the call; nothing was logged or served
	Internal               Code = "INTERNAL"
)

type mapping struct {
	class Class
	grpc  codes.Code
	http  int
}

var catalogue = map[Code]mapping{
	Unavailable:            {ClassRetry, codes.Unavailable, http.StatusServiceUnavailable},
	Timeout:                {ClassRetry, codes.DeadlineExceeded, http.StatusGatewayTimeout},
	DiskFull:               {ClassRetry, codes.ResourceExhausted, http.StatusServiceUnavailable},
	IdempotencyKeyInFlight: {ClassRetry, codes.Aborted, http.StatusConflict},
	InvalidArgument:        {ClassClient, codes.InvalidArgument, http.StatusBadRequest},
	MalformedRequest:       {ClassClient, codes.InvalidArgument, http.StatusBadRequest},
	MessageTooLarge:        {ClassClient, codes.InvalidArgument, http.StatusRequestEntityTooLarge},
	BatchTooLarge:          {ClassClient, codes.InvalidArgument, http.StatusRequestEntityTooLarge},
	LimitTooLarge:          {ClassClient, codes.InvalidArgument, http.StatusBadRequest},
	IdempotencyKeyReused:   {ClassClient, codes.InvalidArgument, http.StatusUnprocessableEntity},
	OffsetOutOfRange:       {ClassClient, codes.OutOfRange, http.StatusRequestedRangeNotSatisfiable},
	OutOfOrderSequence:     {ClassClient, codes.FailedPrecondition, http.StatusConflict},
	ProducerFenced:         {ClassClient, codes.FailedPrecondition, http.StatusConflict},
	UnknownProducer:        {ClassClient, codes.NotFound, http.StatusNotFound},
	ProducerExpired:        {ClassClient, codes.FailedPrecondition, http.StatusGone},
	UnknownTopic:           {ClassClient, codes.NotFound, http.StatusNotFound},
	TopicExists:            {ClassClient, codes.AlreadyExists, http.StatusConflict},
	StaleGeneration:        {ClassClient, codes.FailedPrecondition, http.StatusConflict},
	NotAssigned:            {ClassClient, codes.FailedPrecondition, http.StatusConflict},
	UnknownGroup:           {ClassClient, codes.NotFound, http.StatusNotFound},
	InvalidSchema:          {ClassClient, codes.InvalidArgument, http.StatusUnprocessableEntity},
	IncompatibleSchema:     {ClassClient, codes.FailedPrecondition, http.StatusConflict},
	UnknownSubject:         {ClassClient, codes.NotFound, http.StatusNotFound},
	UnknownSchemaVersion:   {ClassClient, codes.NotFound, http.StatusNotFound},
	UnknownSchema:          {ClassClient, codes.NotFound, http.StatusNotFound},
	SchemaMismatch:         {ClassClient, codes.InvalidArgument, http.StatusBadRequest},
	QuotaExceeded:          {ClassRetry, codes.ResourceExhausted, http.StatusTooManyRequests},
	LimitExceeded:          {ClassRetry, codes.ResourceExhausted, http.StatusTooManyRequests},
	Unauthenticated:        {ClassClient, codes.Unauthenticated, http.StatusUnauthorized},
	PermissionDenied:       {ClassClient, codes.PermissionDenied, http.StatusForbidden},
	Internal:               {ClassServer, codes.Internal, http.StatusInternalServerError},
}

// Error is an API error. Details carries machine-readable data, for example
// "expected_seq" with OUT_OF_ORDER_SEQUENCE.
type Error struct {
	Code    Code
	Message string
	Details map[string]string
}

// New returns an error with the given code and message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// With returns a copy of e with one more detail.
func (e *Error) With(key, value string) *Error {
	details := make(map[string]string, len(e.Details)+1)
	for k, v := range e.Details {
		details[k] = v
	}
	details[key] = value
	return &Error{Code: e.Code, Message: e.Message, Details: details}
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Class says whether to retry, fix the request, or report a fault.
func (e *Error) Class() Class { return lookup(e.Code).class }

// HTTPStatus is the HTTP status this error is answered with.
func (e *Error) HTTPStatus() int { return lookup(e.Code).http }

// GRPCStatus lets grpc-go send the error with its mapped code; the stable
// code travels as the message prefix and in metadata-free form so every
// client can parse it back with FromGRPC.
func (e *Error) GRPCStatus() *status.Status {
	return status.New(lookup(e.Code).grpc, e.Error())
}

// As returns the *Error in err's chain, or wraps an unknown error as INTERNAL
// (the original text kept in the message). As(nil) is nil.
func As(err error) *Error {
	if err == nil {
		return nil
	}
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return apiErr
	}
	return &Error{Code: Internal, Message: err.Error()}
}

// FromGRPC recovers an *Error from an error returned by a gRPC call.
// Transport failures come back as UNAVAILABLE or TIMEOUT.
func FromGRPC(err error) *Error {
	st, ok := status.FromError(err)
	if !ok {
		return As(err)
	}
	if code, msg, ok := splitCode(st.Message()); ok {
		return &Error{Code: code, Message: msg}
	}
	switch st.Code() {
	case codes.Unavailable, codes.Canceled:
		return &Error{Code: Unavailable, Message: st.Message()}
	case codes.DeadlineExceeded:
		return &Error{Code: Timeout, Message: st.Message()}
	}
	return &Error{Code: Internal, Message: st.Message()}
}

func splitCode(text string) (Code, string, bool) {
	for i := 0; i+1 < len(text); i++ {
		if text[i] == ':' && text[i+1] == ' ' {
			code := Code(text[:i])
			if _, known := catalogue[code]; known {
				return code, text[i+2:], true
			}
			return "", "", false
		}
	}
	return "", "", false
}

func lookup(code Code) mapping {
	if m, ok := catalogue[code]; ok {
		return m
	}
	return catalogue[Internal]
}
