package onceq

import (
	"errors"
	"fmt"
	"time"
)

// APIError is what every error answer of the server carries: the body
// {"error": "<CODE>", "message": "..."} (docs/API.md, "Errors"), the HTTP
// status and the X-Request-Id to quote in a report.
//
// The client returns it wrapped in the type its code maps to (*NotFound,
// *Fenced, ...). Match those with errors.As; errors.As(err, &apiErr) with
// an *APIError target matches every one of them.
type APIError struct {
	Code      string // stable, for programs: "NOT_FOUND", "FAILED_PRECONDITION", ...
	Message   string // for humans; may change
	Status    int    // the HTTP status
	RequestID string // the answer's X-Request-Id
}

func (e *APIError) Error() string {
	return fmt.Sprintf("onceq: %s (%d): %s", e.Code, e.Status, e.Message)
}

// api is implemented by every typed error; it lets errors.As reach the
// embedded *APIError.
type api interface{ apiError() *APIError }

func (e *APIError) apiError() *APIError { return e }

// asAPI serves the As methods below: it fills an **APIError target.
func asAPI(e api, target any) bool {
	if t, ok := target.(**APIError); ok {
		*t = e.apiError()
		return true
	}
	return false
}

// InvalidArgument is 400 INVALID_ARGUMENT: a malformed or out-of-range
// request, or an unknown topic on produce or consume. The same request
// fails again.
type InvalidArgument struct{ APIError }

// Unauthorized is 401 UNAUTHENTICATED: no bearer token, or one the server
// does not know (see WithToken).
type Unauthorized struct{ APIError }

// Forbidden is 403 PERMISSION_DENIED: the token lacks the route's scope or
// does not cover the topic.
type Forbidden struct{ APIError }

// NotFound is 404 NOT_FOUND: an unknown topic (on a topic URL or on ack),
// path, or a single node asked for its cluster.
type NotFound struct{ APIError }

// MethodNotAllowed is 405 METHOD_NOT_ALLOWED (a client bug).
type MethodNotAllowed struct{ APIError }

// Conflict is 409 ALREADY_EXISTS: a topic exists with other settings. A
// *Fenced error matches *Conflict too.
type Conflict struct{ APIError }

// Fenced is 409 FAILED_PRECONDITION: you no longer hold that delivery (the
// lease went to another consumer, the attempt or fencing token is not the
// current one, the key was committed by another delivery). Nothing changed
// on the server: stop the work and do not retry.
type Fenced struct{ Conflict }

// PayloadTooLarge is 413 PAYLOAD_TOO_LARGE: the body is over the server's
// limit.
type PayloadTooLarge struct{ APIError }

// Unavailable is 503 UNAVAILABLE (shutting down, storage not writable, no
// leader): safe to retry after RetryAfter. The client already retried
// (WithRetries) before returning it. A *ResourceExhausted error (429)
// matches *Unavailable too.
type Unavailable struct {
	APIError
	RetryAfter time.Duration // the server's retry_after_ms, else Retry-After, else 1 s
}

// ResourceExhausted is 429 RESOURCE_EXHAUSTED: backpressure or a topic
// limit; retry after RetryAfter.
type ResourceExhausted struct{ Unavailable }

// Internal is 500 INTERNAL, or any other 5xx: a bug in onceq; report it
// with RequestID.
type Internal struct{ APIError }

// As lets errors.As match a *Fenced with a *Conflict target.
func (e *Fenced) As(target any) bool {
	if t, ok := target.(**Conflict); ok {
		*t = &e.Conflict
		return true
	}
	return asAPI(e, target)
}

// As lets errors.As match a *ResourceExhausted with an *Unavailable target.
func (e *ResourceExhausted) As(target any) bool {
	if t, ok := target.(**Unavailable); ok {
		*t = &e.Unavailable
		return true
	}
	return asAPI(e, target)
}

// The As methods of the other types only add the *APIError target.

func (e *InvalidArgument) As(target any) bool  { return asAPI(e, target) }
func (e *Unauthorized) As(target any) bool     { return asAPI(e, target) }
func (e *Forbidden) As(target any) bool        { return asAPI(e, target) }
func (e *NotFound) As(target any) bool         { return asAPI(e, target) }
func (e *MethodNotAllowed) As(target any) bool { return asAPI(e, target) }
func (e *Conflict) As(target any) bool         { return asAPI(e, target) }
func (e *PayloadTooLarge) As(target any) bool  { return asAPI(e, target) }
func (e *Unavailable) As(target any) bool      { return asAPI(e, target) }
func (e *Internal) As(target any) bool         { return asAPI(e, target) }

// TransportError means no complete answer came: the connection was
// refused, reset or timed out (after the client's retries). Unwrap gives
// the network error.
type TransportError struct {
	Op  string // "POST /v1/produce"
	Err error
}

func (e *TransportError) Error() string { return "onceq: " + e.Op + ": " + e.Err.Error() }
func (e *TransportError) Unwrap() error { return e.Err }

// ErrLeaseLost is what (*Job).Check returns once another consumer holds
// the job's message: stop the work, and write nothing.
var ErrLeaseLost = errors.New("onceq: lease lost: another consumer holds the message now")

// codeOfStatus names the code of an error answer without a known one.
var codeOfStatus = map[int]string{
	400: "INVALID_ARGUMENT",
	401: "UNAUTHENTICATED",
	403: "PERMISSION_DENIED",
	404: "NOT_FOUND",
	405: "METHOD_NOT_ALLOWED",
	409: "ALREADY_EXISTS",
	413: "PAYLOAD_TOO_LARGE",
	429: "RESOURCE_EXHAUSTED",
	503: "UNAVAILABLE",
}

// newAPIError makes the typed error for an error answer: by its code, else
// by its status.
func newAPIError(base APIError, retryAfter time.Duration) error {
	if err := typedError(base.Code, base, retryAfter); err != nil {
		return err
	}
	if err := typedError(codeOfStatus[base.Status], base, retryAfter); err != nil {
		return err
	}
	if base.Status >= 500 {
		return &Internal{base}
	}
	return &base
}

// typedError is the error type of one code; nil for a code it does not know.
func typedError(code string, base APIError, retryAfter time.Duration) error {
	switch code {
	case "INVALID_ARGUMENT":
		return &InvalidArgument{base}
	case "UNAUTHENTICATED":
		return &Unauthorized{base}
	case "PERMISSION_DENIED":
		return &Forbidden{base}
	case "NOT_FOUND":
		return &NotFound{base}
	case "METHOD_NOT_ALLOWED":
		return &MethodNotAllowed{base}
	case "ALREADY_EXISTS":
		return &Conflict{base}
	case "FAILED_PRECONDITION":
		return &Fenced{Conflict{base}}
	case "PAYLOAD_TOO_LARGE":
		return &PayloadTooLarge{base}
	case "RESOURCE_EXHAUSTED":
		return &ResourceExhausted{Unavailable{base, retryAfter}}
	case "UNAVAILABLE":
		return &Unavailable{base, retryAfter}
	case "INTERNAL":
		return &Internal{base}
	}
	return nil
}
