package onceq_test

// Every error answer becomes its type, by code and else by status, without
// a server: a fake one answers each case.

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"onceq"
)

func TestErrorAnswersBecomeTheirTypes(t *testing.T) {
	cases := []struct {
		status int
		body   string
		check  func(error) bool
	}{
		{400, `{"error":"INVALID_ARGUMENT","message":"m"}`, is[*onceq.InvalidArgument]},
		{401, `{"error":"UNAUTHENTICATED","message":"m"}`, is[*onceq.Unauthorized]},
		{403, `{"error":"PERMISSION_DENIED","message":"m"}`, is[*onceq.Forbidden]},
		{404, `{"error":"NOT_FOUND","message":"m"}`, is[*onceq.NotFound]},
		{405, `{"error":"METHOD_NOT_ALLOWED","message":"m"}`, is[*onceq.MethodNotAllowed]},
		{409, `{"error":"ALREADY_EXISTS","message":"m"}`, func(err error) bool { return is[*onceq.Conflict](err) && !is[*onceq.Fenced](err) }},
		{409, `{"error":"FAILED_PRECONDITION","message":"m"}`, func(err error) bool { return is[*onceq.Fenced](err) && is[*onceq.Conflict](err) }},
		{413, `{"error":"PAYLOAD_TOO_LARGE","message":"m"}`, is[*onceq.PayloadTooLarge]},
		{429, `{"error":"RESOURCE_EXHAUSTED","message":"m","retry_after_ms":1500}`, func(err error) bool {
			var un *onceq.Unavailable
			return is[*onceq.ResourceExhausted](err) && errors.As(err, &un) && un.RetryAfter == 1500*time.Millisecond
		}},
		{503, `{"error":"UNAVAILABLE","message":"m"}`, func(err error) bool { // Retry-After: 2 (header)
			var un *onceq.Unavailable
			return errors.As(err, &un) && !is[*onceq.ResourceExhausted](err) && un.RetryAfter == 2*time.Second
		}},
		{500, `{"error":"INTERNAL","message":"m"}`, is[*onceq.Internal]},
		// A code this client does not know: by status; a body that is not JSON too.
		{404, `{"error":"GONE_FISHING","message":"m"}`, is[*onceq.NotFound]},
		{502, `<html>bad gateway</html>`, is[*onceq.Internal]},
		{418, `{"error":"TEAPOT","message":"m"}`, func(err error) bool {
			var api *onceq.APIError
			return errors.As(err, &api) && api.Status == 418 && api.Code == "TEAPOT"
		}},
	}
	for _, tc := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Request-Id", "req-1")
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(tc.body))
		}))
		c := onceq.NewClient(srv.URL, onceq.WithRetries(0))
		if err := c.Err(); err != nil {
			t.Fatal(err)
		}
		_, err := c.ListTopics(context.Background())
		srv.Close()
		var api *onceq.APIError
		if !tc.check(err) || !errors.As(err, &api) || api.Status != tc.status || api.RequestID != "req-1" {
			t.Errorf("%d %s: %#v", tc.status, tc.body, err)
		}
	}
}

// is tells whether errors.As matches err with a T target.
func is[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}
