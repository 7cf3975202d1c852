package onceq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Healthz is GET /v1/healthz. A 503 (storage not writable) is not an
// error: Health.OK is false and Reason says why. Not retried.
func (c *Client) Healthz(ctx context.Context) (Health, error) {
	k := call{method: http.MethodGet, path: "/v1/healthz"}
	r, err := c.once(ctx, k, nil)
	if err != nil {
		return Health{}, &TransportError{Op: k.op(), Err: err}
	}
	if r.status != http.StatusOK && r.status != http.StatusServiceUnavailable {
		return Health{}, errorOf(r)
	}
	h, err := decode[Health](r, k)
	h.OK = r.status == http.StatusOK
	return h, err
}

// Version is GET /v1/version.
func (c *Client) Version(ctx context.Context) (ServerVersion, error) {
	return get[ServerVersion](ctx, c, call{method: http.MethodGet, path: "/v1/version"})
}

// OpenAPI is GET /v1/openapi.json: the API as an OpenAPI 3.1 document.
func (c *Client) OpenAPI(ctx context.Context) (json.RawMessage, error) {
	return get[json.RawMessage](ctx, c, call{method: http.MethodGet, path: "/v1/openapi.json"})
}

// Metrics is GET /metrics: Prometheus text format.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	r, err := c.do(ctx, call{method: http.MethodGet, path: "/metrics"})
	if err != nil {
		return "", err
	}
	return string(r.body), nil
}

// Cluster is GET /v1/cluster; *NotFound on a single node.
func (c *Client) Cluster(ctx context.Context) (ClusterStatus, error) {
	return get[ClusterStatus](ctx, c, call{method: http.MethodGet, path: "/v1/cluster"})
}

// CreateTopic is POST /v1/topics. Creating it again with the same settings
// succeeds; with other settings it is a *Conflict.
func (c *Client) CreateTopic(ctx context.Context, name string, cfg TopicConfig) (TopicCreated, error) {
	body, err := cfg.body(name)
	if err != nil {
		return TopicCreated{}, err
	}
	return get[TopicCreated](ctx, c, call{method: http.MethodPost, path: "/v1/topics", body: body})
}

// ListTopics is GET /v1/topics: the names the token covers, sorted.
func (c *Client) ListTopics(ctx context.Context) ([]string, error) {
	r, err := get[struct {
		Topics []string `json:"topics"`
	}](ctx, c, call{method: http.MethodGet, path: "/v1/topics"})
	return r.Topics, err
}

// GetTopic is GET /v1/topics/{name}; *NotFound for an unknown topic.
func (c *Client) GetTopic(ctx context.Context, name string) (TopicInfo, error) {
	return get[TopicInfo](ctx, c, call{method: http.MethodGet, path: "/v1/topics/" + url.PathEscape(name)})
}

// DeleteTopic is DELETE /v1/topics/{name}: the topic and all its data.
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	_, err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/topics/" + url.PathEscape(name)})
	return err
}

// Consume is POST /v1/consume as a long-poll batch: up to
// o.MaxMessages deliveries (default 1), waiting up to o.WaitMS for the
// first. o.Acks (the previous batch's) are applied first, as AckBatch
// would, in the same round trip; their results are in ConsumeResult.Acks.
func (c *Client) Consume(ctx context.Context, topic, group, owner string, o ConsumeOptions) (ConsumeResult, error) {
	if o.MaxMessages == 0 {
		o.MaxMessages = 1
	}
	body := map[string]any{
		"topic": topic, "group": group, "owner": owner,
		"max_messages": o.MaxMessages, "wait_ms": o.WaitMS,
	}
	if o.LeaseMS != 0 {
		body["lease_ms"] = o.LeaseMS
	}
	if o.DeadlineMS != 0 {
		body["deadline_ms"] = o.DeadlineMS
	}
	if len(o.Acks) > 0 {
		for _, a := range o.Acks {
			if len(a.Produce) > 0 {
				return ConsumeResult{}, errors.New("onceq: acks carried on a consume cannot produce; send them with AckStep or AckBatch")
			}
		}
		body["acks"] = o.Acks
	}
	k := call{method: http.MethodPost, path: "/v1/consume", body: body,
		wait: time.Duration(o.WaitMS) * time.Millisecond}
	r, err := c.do(ctx, k)
	if err != nil {
		return ConsumeResult{}, err
	}
	var out ConsumeResult
	for _, line := range bytes.Split(r.body, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var acks struct {
			Acks   *[]AckResult `json:"acks"`
			Offset *int64       `json:"offset"`
		}
		if err := json.Unmarshal(line, &acks); err != nil {
			return out, fmt.Errorf("onceq: %s: unexpected line %.200q: %w", k.op(), line, err)
		}
		if acks.Acks != nil && acks.Offset == nil {
			out.Acks = *acks.Acks
			continue
		}
		d, err := parseDelivery(line)
		if err != nil {
			return out, fmt.Errorf("onceq: %s: %w", k.op(), err)
		}
		out.Messages = append(out.Messages, d)
	}
	return out, nil
}

func parseDelivery(line []byte) (Delivery, error) {
	var d Delivery
	if err := json.Unmarshal(line, &d); err != nil {
		return d, fmt.Errorf("unexpected delivery %.200q: %w", line, err)
	}
	d.IdempotencyKey = d.envelopeString("idempotency_key")
	return d, nil
}

// jsonFields is v's JSON object as a map, its numbers kept exact.
func jsonFields(v any) (map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	fields := map[string]any{}
	return fields, dec.Decode(&fields)
}

// owned is the body of a call on a delivery: topic, group, owner and the
// item's fields.
func owned(topic, group, owner string, item any) (map[string]any, error) {
	body, err := jsonFields(item)
	if err != nil {
		return nil, err
	}
	body["topic"], body["group"], body["owner"] = topic, group, owner
	return body, nil
}

// Ack is POST /v1/ack: marks the delivery done and, if the message has an
// idempotency key, commits it with item.Result. *Fenced if you no longer
// hold the delivery (or the attempts/fencing token fence does not match).
// An item with Produce stores them too; AckStep also returns where.
func (c *Client) Ack(ctx context.Context, topic, group, owner string, item AckItem) error {
	_, err := c.AckStep(ctx, topic, group, owner, item)
	return err
}

// AckStep is POST /v1/ack of one workflow step: it acks the delivery (as
// Ack) and stores item.Produce in the same atomic step, both or neither.
// The result's Produced says where each message went, in order (Pending
// ones are delivered later by the broker's outbox); none without Produce,
// and for a repeated ack whose message had no idempotency key. A refused
// ack stores none of them: *Fenced (409), *InvalidArgument (a bad message,
// over 1000), *NotFound (unknown target topic), *Forbidden,
// *ResourceExhausted (a target's backlog).
func (c *Client) AckStep(ctx context.Context, topic, group, owner string, item AckItem) (AckResult, error) {
	out := AckResult{Partition: item.Partition, Offset: item.Offset}
	if err := checkProduce(item.Produce); err != nil {
		return out, err
	}
	body, err := owned(topic, group, owner, item)
	if err != nil {
		return out, fmt.Errorf("onceq: POST /v1/ack: %w", err)
	}
	k := call{method: http.MethodPost, path: "/v1/ack", body: body}
	r, err := c.do(ctx, k)
	if err != nil {
		return out, err
	}
	out.Status = "acked"
	if r.status == http.StatusNoContent || len(bytes.TrimSpace(r.body)) == 0 {
		return out, nil
	}
	var doc struct {
		Status   string     `json:"status"`
		Produced []Produced `json:"produced"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		return out, fmt.Errorf("onceq: %s: unexpected answer %.200q: %w", k.op(), r.body, err)
	}
	if doc.Status != "" {
		out.Status = doc.Status
	}
	out.Produced = doc.Produced
	return out, nil
}

// AckBatch is POST /v1/ack with acks: each item acked on its own; a refused
// item has Status "error" and its code in Error. An item's Produce is
// stored with its ack, atomically; its result's Produced says where.
func (c *Client) AckBatch(ctx context.Context, topic, group, owner string, items []AckItem) ([]AckResult, error) {
	for _, it := range items {
		if err := checkProduce(it.Produce); err != nil {
			return nil, err
		}
	}
	k := call{method: http.MethodPost, path: "/v1/ack",
		body: map[string]any{"topic": topic, "group": group, "owner": owner, "acks": items}}
	r, err := get[struct {
		Results []AckResult `json:"results"`
	}](ctx, c, k)
	return r.Results, err
}

// Nack is POST /v1/nack: gives the delivery back for a retry after
// item.DelayMS (nil: the topic's backoff); item.Reason becomes the
// message's last_error.
func (c *Client) Nack(ctx context.Context, topic, group, owner string, item NackItem) error {
	return c.onDelivery(ctx, "/v1/nack", topic, group, owner, item, nil)
}

// Extend is POST /v1/extend: the lease now ends item.LeaseMS from now; it
// returns the new lease_expires_at_ms. *Fenced if you no longer hold the
// delivery: stop the work.
func (c *Client) Extend(ctx context.Context, topic, group, owner string, item ExtendItem) (int64, error) {
	var out struct {
		LeaseExpiresAtMS int64 `json:"lease_expires_at_ms"`
	}
	err := c.onDelivery(ctx, "/v1/extend", topic, group, owner, item, &out)
	return out.LeaseExpiresAtMS, err
}

// onDelivery posts an ack, nack or extend and decodes its answer into out
// (nil: none expected).
func (c *Client) onDelivery(ctx context.Context, path, topic, group, owner string, item, out any) error {
	body, err := owned(topic, group, owner, item)
	if err != nil {
		return fmt.Errorf("onceq: POST %s: %w", path, err)
	}
	k := call{method: http.MethodPost, path: path, body: body}
	r, err := c.do(ctx, k)
	if err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal(r.body, out); err != nil {
		return fmt.Errorf("onceq: %s: unexpected answer %.200q: %w", k.op(), r.body, err)
	}
	return nil
}

// GetKey is GET /v1/keys: the key's state in the group; with o.WaitMS, it
// waits up to that long for the key to be committed.
func (c *Client) GetKey(ctx context.Context, topic, group, key string, o KeyOptions) (KeyState, error) {
	q := keyQuery(topic, group, key, o.TenantID)
	if o.WaitMS > 0 {
		q.Set("wait_ms", strconv.Itoa(o.WaitMS))
	}
	return get[KeyState](ctx, c, call{method: http.MethodGet, path: "/v1/keys", query: q,
		wait: time.Duration(o.WaitMS) * time.Millisecond})
}

// KeyHistory is GET /v1/keys/history (topics with key_history): the key's
// last events in the group, oldest first. *Fenced (409) for a topic without.
func (c *Client) KeyHistory(ctx context.Context, topic, group, key, tenantID string) ([]KeyEvent, error) {
	r, err := get[struct {
		Events []KeyEvent `json:"events"`
	}](ctx, c, call{method: http.MethodGet, path: "/v1/keys/history", query: keyQuery(topic, group, key, tenantID)})
	return r.Events, err
}

func keyQuery(topic, group, key, tenantID string) url.Values {
	q := url.Values{"topic": {topic}, "group": {group}, "key": {key}}
	if tenantID != "" {
		q.Set("tenant_id", tenantID)
	}
	return q
}

// Redrive is POST /v1/dlq/redrive: moves up to maxMessages (0: all)
// dead-lettered messages of dlq.<topic> back to topic; returns how many
// moved.
func (c *Client) Redrive(ctx context.Context, topic string, maxMessages int) (int, error) {
	body := map[string]any{"topic": topic}
	if maxMessages > 0 {
		body["max_messages"] = maxMessages
	}
	r, err := get[struct {
		Moved int `json:"moved"`
	}](ctx, c, call{method: http.MethodPost, path: "/v1/dlq/redrive", body: body})
	return r.Moved, err
}

// Replay is POST /v1/replay: one page of a dry run, or of a replay with
// req.Apply. Follow ReplayResult.Next (as req.Cursor) to the end.
func (c *Client) Replay(ctx context.Context, req ReplayRequest) (ReplayResult, error) {
	body, err := jsonFields(req)
	if err != nil {
		return ReplayResult{}, err
	}
	body["dry_run"] = !req.Apply
	return get[ReplayResult](ctx, c, call{method: http.MethodPost, path: "/v1/replay", body: body})
}
