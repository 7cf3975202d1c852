#!/usr/bin/env bash
# Fencing tokens end to end (docs/API.md, "Fencing tokens"): two consumers
# get the same message one after the other (the first one's lease runs out
# while it is "paused"); both then write to a SQLite database with the
# token, and the database refuses the older one.
#
# Needs a running onceqd (ONCEQ, default http://127.0.0.1:8080), curl and
# python3 (its standard sqlite3 module). Usage: docs/examples/fencing.sh
set -euo pipefail
ONCEQ=${ONCEQ:-http://127.0.0.1:8080}
TOPIC=fencing-demo-$$
DB=$(mktemp -t fencing.XXXXXX.db)
trap 'rm -f "$DB"' EXIT

token_of() { python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["fencing_token"])'; }

# The consumer's side effect: one guarded UPDATE. 0 rows: a newer delivery
# already wrote, so this one must stop (and not ack).
write_with_token() {  # $1 = who, $2 = token
  python3 - "$DB" "$1" "$2" <<'PY'
import sqlite3, sys
db, who, token = sys.argv[1], sys.argv[2], int(sys.argv[3])
con = sqlite3.connect(db)
con.execute("CREATE TABLE IF NOT EXISTS accounts (id INTEGER PRIMARY KEY, balance INTEGER, last_token INTEGER)")
con.execute("INSERT OR IGNORE INTO accounts VALUES (1, 100, 0)")
cur = con.execute("UPDATE accounts SET balance = balance - 10, last_token = ? "
                  "WHERE id = 1 AND last_token < ?", (token, token))
con.commit()
print(f"{who}: token {token}: {'written' if cur.rowcount == 1 else 'REFUSED (stale token)'}")
PY
}

curl -sf -X POST "$ONCEQ/v1/topics" -d "{\"name\":\"$TOPIC\"}" >/dev/null
curl -sf -X POST "$ONCEQ/v1/produce" \
  -d "{\"topic\":\"$TOPIC\",\"value\":\"charge 10\",\"envelope\":{\"idempotency_key\":\"charge-1\"}}" >/dev/null

# Worker A takes the message with a short lease, then "pauses".
T_A=$(curl -sf "$ONCEQ/v1/consume?topic=$TOPIC&group=billing&owner=A&max_messages=1&lease_ms=200" | token_of)
sleep 0.5
# Worker B gets the redelivery with a larger token and writes first.
T_B=$(curl -sf "$ONCEQ/v1/consume?topic=$TOPIC&group=billing&owner=B&max_messages=1" | token_of)
write_with_token B "$T_B"
# A wakes up and tries to write: the database refuses its older token.
write_with_token A "$T_A"
# The broker refuses A's ack as well; B's ack commits the key.
curl -s -X POST "$ONCEQ/v1/ack" -d "{\"topic\":\"$TOPIC\",\"group\":\"billing\",\"owner\":\"A\",
  \"partition\":0,\"offset\":0,\"fencing_token\":$T_A}"; echo
curl -s -o /dev/null -w 'B ack: %{http_code}\n' -X POST "$ONCEQ/v1/ack" \
  -d "{\"topic\":\"$TOPIC\",\"group\":\"billing\",\"owner\":\"B\",\"partition\":0,\"offset\":0,\"fencing_token\":$T_B}"
python3 -c "import sqlite3,sys; print('balance, last_token =', sqlite3.connect(sys.argv[1]).execute('SELECT balance, last_token FROM accounts').fetchone())" "$DB"
curl -s -o /dev/null -X DELETE "$ONCEQ/v1/topics/$TOPIC"
