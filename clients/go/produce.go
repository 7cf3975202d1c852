package onceq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// ProduceOption sets a field of a produced message (Client.Produce) or of
// the whole request (WithSkipIfCommitted, WithoutDedup: also
// Client.ProduceBatch).
type ProduceOption func(*produceOptions)

type produceOptions struct {
	key             *string
	envelope        map[string]any
	skipIfCommitted []string
	noDedup         bool
	perMessage      bool // an option that ProduceBatch cannot take was given
}

func (o *produceOptions) set(field string, v any) {
	if o.envelope == nil {
		o.envelope = map[string]any{}
	}
	o.envelope[field] = v
	o.perMessage = true
}

// WithKey sets the message's key: it picks the partition, so messages with
// the same key stay in order.
func WithKey(key string) ProduceOption {
	return func(o *produceOptions) { o.key, o.perMessage = &key, true }
}

// WithIdempotencyKey sets envelope.idempotency_key, the identity of the
// work: a group commits it once, and every other message with it is
// acknowledged without delivery (docs/API.md, "Idempotency keys").
func WithIdempotencyKey(key string) ProduceOption {
	return func(o *produceOptions) { o.set("idempotency_key", key) }
}

// WithMsgID sets the produce dedup id (envelope.msg_id) instead of a
// random one: a repeat within the topic's dedup window is stored once.
func WithMsgID(id string) ProduceOption { return func(o *produceOptions) { o.set("msg_id", id) } }

// WithTenant sets envelope.tenant_id, which scopes the idempotency key.
func WithTenant(tenantID string) ProduceOption {
	return func(o *produceOptions) { o.set("tenant_id", tenantID) }
}

// WithPartition sets envelope.partition_override.
func WithPartition(p int) ProduceOption {
	return func(o *produceOptions) { o.set("partition_override", p) }
}

// WithDelayMS sets envelope.delay_ms: not delivered before this delay.
func WithDelayMS(ms int64) ProduceOption { return func(o *produceOptions) { o.set("delay_ms", ms) } }

// WithKeyTTLMS sets envelope.key_ttl_ms: how long the committed key lives.
func WithKeyTTLMS(ms int64) ProduceOption {
	return func(o *produceOptions) { o.set("key_ttl_ms", ms) }
}

// WithHeaders sets envelope.headers (free-form strings).
func WithHeaders(h map[string]string) ProduceOption {
	return func(o *produceOptions) { o.set("headers", h) }
}

// WithEnvelope sets any other envelope field (run_id, step_id,
// retry_policy, deadline, ...).
func WithEnvelope(field string, value any) ProduceOption {
	return func(o *produceOptions) { o.set(field, value) }
}

// WithSkipIfCommitted stores nothing if the message's idempotency key is
// already committed in every one of groups: the result is then
// AlreadyCommitted, with each group's commit and result.
func WithSkipIfCommitted(groups ...string) ProduceOption {
	return func(o *produceOptions) { o.skipIfCommitted = append(o.skipIfCommitted, groups...) }
}

// WithoutDedup sends no dedup id; the produce is then not retried after a
// network error (it might have been stored).
func WithoutDedup() ProduceOption { return func(o *produceOptions) { o.noDedup = true } }

// Produce is POST /v1/produce of one message.
//
// value: a string or []byte is sent as is, anything else as its JSON text.
// The call gets a dedup id (envelope.msg_id: random unless WithMsgID) once
// and sends the same one on every retry after a network error, a 429 or a
// 503, so a produce whose answer was lost is stored once (within the
// topic's dedup_window_ms). ProduceResult.MsgID is that id.
func (c *Client) Produce(ctx context.Context, topic string, value any, opts ...ProduceOption) (ProduceResult, error) {
	var o produceOptions
	for _, opt := range opts {
		opt(&o)
	}
	text, err := valueText(value)
	if err != nil {
		return ProduceResult{}, err
	}
	msgID := withMsgID(&o.envelope, o.noDedup)
	msg := map[string]any{"topic": topic, "value": text}
	if o.key != nil {
		msg["key"] = *o.key
	}
	if len(o.envelope) > 0 {
		msg["envelope"] = o.envelope
	}
	if len(o.skipIfCommitted) > 0 {
		msg["skip_if_committed"] = o.skipIfCommitted
	}
	res, err := get[ProduceResult](ctx, c, call{method: http.MethodPost, path: "/v1/produce", body: msg,
		noRetryNet: msgID == ""})
	if res.Topic == "" {
		res.Topic = topic
	}
	res.MsgID = msgID
	return res, err
}

// ProduceBatch is POST /v1/produce of 1..1000 messages, stored atomically
// (all or none). Each message gets its own dedup id, kept on retries,
// unless WithoutDedup. Of the options it takes WithSkipIfCommitted and
// WithoutDedup; the others are per message, in Message (whose Topic is
// "" or topic).
func (c *Client) ProduceBatch(ctx context.Context, topic string, msgs []Message, opts ...ProduceOption) ([]ProduceResult, error) {
	var o produceOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.perMessage {
		return nil, errors.New("onceq: ProduceBatch takes WithSkipIfCommitted and WithoutDedup; set the rest in each Message")
	}
	items := make([]map[string]any, len(msgs))
	ids := make([]string, len(msgs))
	retryNet := true
	for i, m := range msgs {
		if m.Topic != "" && m.Topic != topic {
			return nil, fmt.Errorf("onceq: ProduceBatch to %s: message %d is for %s", topic, i, m.Topic)
		}
		text, err := valueText(m.Value)
		if err != nil {
			return nil, fmt.Errorf("%w (message %d)", err, i)
		}
		env := make(map[string]any, len(m.Envelope)+2)
		for k, v := range m.Envelope {
			env[k] = v
		}
		if m.IdempotencyKey != "" {
			env["idempotency_key"] = m.IdempotencyKey
		}
		if m.MsgID != "" {
			env["msg_id"] = m.MsgID
		}
		ids[i] = withMsgID(&env, o.noDedup)
		retryNet = retryNet && ids[i] != ""
		item := map[string]any{"value": text}
		if m.Key != "" {
			item["key"] = m.Key
		}
		if len(env) > 0 {
			item["envelope"] = env
		}
		items[i] = item
	}
	body := map[string]any{"topic": topic, "messages": items}
	if len(o.skipIfCommitted) > 0 {
		body["skip_if_committed"] = o.skipIfCommitted
	}
	r, err := get[struct {
		Topic   string          `json:"topic"`
		Results []ProduceResult `json:"results"`
	}](ctx, c, call{method: http.MethodPost, path: "/v1/produce", body: body, noRetryNet: !retryNet})
	for i := range r.Results {
		r.Results[i].Topic = topic
		if i < len(ids) {
			r.Results[i].MsgID = ids[i]
		}
	}
	return r.Results, err
}

// withMsgID gives the envelope its dedup id (a random one unless it has
// one, or none with noDedup) and returns it.
func withMsgID(env *map[string]any, noDedup bool) string {
	if *env == nil {
		*env = map[string]any{}
	}
	if id, ok := (*env)["msg_id"].(string); ok && id != "" {
		return id
	}
	if noDedup {
		return ""
	}
	id := newID()
	(*env)["msg_id"] = id
	return id
}

// newID is a random UUID (version 4).
func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("onceq: crypto/rand: " + err.Error())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// valueText is a message value as the API takes it: a string.
func valueText(v any) (string, error) {
	switch t := v.(type) {
	case string:
		return t, nil
	case []byte:
		return string(t), nil
	case json.RawMessage:
		return string(t), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("onceq: the value is not JSON: %w", err)
	}
	return string(b), nil
}
