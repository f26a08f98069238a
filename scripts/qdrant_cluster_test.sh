#!/usr/bin/env bash
# Cairn on a 3-node Qdrant cluster (loopback), collection with 2 shards x replication factor 2:
# ingest and recall, kill -9 a node, keep recalling and writing, restart it, check that it
# caught up, and that no write Cairn acknowledged (2xx) was lost.
#
#   scripts/qdrant_cluster_test.sh [QDRANT_BIN] [WORKDIR]
#     QDRANT_BIN  default $QDRANT_BIN (build one: README, "Scaling out")
#     WORKDIR     default a new mktemp dir under /tmp (kept: node logs and storage, cairn logs)
#   env: CAIRN_BIN (default target/release/cairn; build: cargo build --release --workspace --bins)
#        OUTAGE_WRITE_SECS (20) seconds of writes while the first node is down
#        CLUSTER_TEST_PHASE6=0 skips the checks of cairn A while its node is down (phase 6)
#
# Phases
#   1. Three Qdrant nodes on free loopback ports (6400-6499): node 1 starts the cluster, nodes 2
#      and 3 join with --bootstrap; wait for 3 peers (GET /cluster).
#   2. `cairn serve` ("cairn A", fresh --data-dir) against node 1's gRPC port with
#      CAIRN_QDRANT_SHARDS=2 CAIRN_QDRANT_REPLICATION=2 CAIRN_QDRANT_COLLECTION=cluster_test:
#      /readyz says backend qdrant; GET /collections/cluster_test/cluster shows 2 shards x 2
#      Active replicas, each shard on two different nodes.
#   3. Baseline: documents (each with a unique marker word) and messages; a recall whose cited
#      refs are recorded. Every write answered 2xx is appended to WORKDIR/acked.tsv.
#   4. kill -9 a node holding replicas that is not node 1 (V1). Recall at once (200 with the same
#      citations, or 503 `unavailable` then 200), then OUTAGE_WRITE_SECS of document and message
#      writes: 2xx and 503 counted, anything else (500, 504, timeouts) is a failure. Every
#      acknowledged write is then read back (GET the document's chunks and find its marker,
#      recall the quoted marker, GET the message) while V1 is still down.
#   5. Restart V1 on its storage; poll the collection's cluster info until its replicas are
#      Active. Then for every node that shares a shard with V1 (its "partners"): kill -9 it, so
#      that V1 is the only live replica of that shard, and read everything back through a second
#      Cairn ("cairn B", connected to V1): what was written while V1 was down can only come
#      from V1's copy now, which proves it caught up. Write a little more, restart the partner.
#   6. kill -9 node 1, the node cairn A is connected to: see below. When node 1 was a partner in
#      phase 5 these checks run there instead: no node is killed twice. (Qdrant 1.18.3 debug
#      builds can panic loading a shard that was restarted and killed again soon after:
#      qdrant/qdrant#9844; wait_node names it if it happens.)
#   Final: everything acknowledged is read back through cairn A with all nodes up, the baseline
#   recall still cites the same refs; a summary; exit 0 only if every check passed.
#
# Documented limitation (phase 6 measures it): Cairn's client connects to ONE Qdrant URL. Qdrant
# forwards requests between peers, so losing any other node is transparent to Cairn, but when
# the node behind CAIRN_QDRANT_URL dies, every call fails at the connection; Cairn retries for
# ~6 s and then answers 503 `unavailable` until that node is back (it reconnects by itself, no
# restart of Cairn needed). Cairn does not fail over to another peer: to survive the loss of
# that node, put a TCP/gRPC load balancer (or a local proxy) in front of the nodes, or run
# Cairn processes against different nodes. Phase 6 checks exactly this: cairn A answers 503
# (not 500, not a hang) while node 1 is down, cairn B (connected to another node) keeps
# serving reads and writes, and cairn A serves again once node 1 is back.
# If phase 6 reports `500 internal` at once (no retries): qdrant-client (channel_pool.rs) turns a
# refused connection into `Status::internal("Failed to connect to ...")`, and a Cairn that
# retries and answers 503 only for Unavailable/DeadlineExceeded/... codes treats it as an
# engine error (the cairn log shows "qdrant query: ... Internal error Failed to connect to").
# CLUSTER_TEST_PHASE6=0 runs phases 1-5 only.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
QBIN=$(readlink -f "${1:-${QDRANT_BIN:?give the qdrant binary as the first argument or QDRANT_BIN (README: Scaling out)}}")
[ -x "$QBIN" ] || { echo "no qdrant binary at $QBIN" >&2; exit 2; }
CAIRN=${CAIRN_BIN:-$REPO/target/release/cairn}
[ -x "$CAIRN" ] || { echo "no cairn binary at $CAIRN (cargo build --release --workspace --bins)" >&2; exit 2; }
if [ -n "${2:-}" ]; then
  WORK=$2; mkdir -p "$WORK"; WORK=$(readlink -f "$WORK")
  if [ -n "$(ls -A "$WORK")" ] && [ ! -f "$WORK/.qdrant_cluster_test" ]; then
    echo "refusing: $WORK is not empty and was not made by this script" >&2; exit 2; fi
  rm -rf "${WORK:?}"/n1 "${WORK:?}"/n2 "${WORK:?}"/n3 "${WORK:?}"/cairn-* "$WORK"/*.tsv "$WORK"/resp.json
else
  WORK=$(mktemp -d /tmp/cairn-cluster-test.XXXXXX)
fi
touch "$WORK/.qdrant_cluster_test"
for tool in curl jq python3; do command -v $tool >/dev/null || { echo "needs $tool" >&2; exit 2; }; done

COLL=cluster_test
T=ct; U=alice
OUTAGE_WRITE_SECS=${OUTAGE_WRITE_SECS:-20}
PHASE6=${CLUSTER_TEST_PHASE6:-1}
RESP=$WORK/resp.json
ACKED=$WORK/acked.tsv     # kind ns id marker phase via   (every write answered 2xx)
: >"$ACKED"

declare -A QPID CPID CURL CNT
FAILS=()
fail() { FAILS+=("$*"); echo "  FAIL: $*"; }
ok() { echo "  ok: $*"; }
now_ms() { date +%s%3N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", (b-a)/1000}'; }   # secs START END
inc() { CNT[$1]=$(( ${CNT[$1]:-0} + 1 )); }
hr() { echo; echo "=== $* ($(date +%T))"; }

# ---------------------------------------------------------------- processes and cleanup
finish() {
  local rc=$?
  set +e
  for n in "${!CPID[@]}"; do kill "${CPID[$n]}" 2>/dev/null; done
  for i in "${!QPID[@]}"; do kill "${QPID[$i]}" 2>/dev/null; done
  for n in "${!CPID[@]}"; do wait "${CPID[$n]}" 2>/dev/null; done
  for i in "${!QPID[@]}"; do
    for _ in $(seq 1 100); do kill -0 "${QPID[$i]}" 2>/dev/null || break; sleep 0.1; done
    kill -9 "${QPID[$i]}" 2>/dev/null; wait "${QPID[$i]}" 2>/dev/null
  done
  if [ "$rc" != 0 ]; then
    echo
    echo "FAILED (exit $rc). Logs:"
    for f in "$WORK"/n?/log "$WORK"/cairn-*/log; do [ -f "$f" ] && echo "  $f"; done
    echo "  acknowledged writes: $ACKED"
  else
    echo "work dir (logs, storage): $WORK"
  fi
}
trap finish EXIT
trap 'exit 130' INT TERM

# 9 Qdrant ports (http, grpc, p2p per node) and 2 Cairn ports, free on 127.0.0.1 in 6400-6499.
read -r -a P < <(python3 -c '
import socket
out = []
for p in range(6400, 6500):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); out.append(p)
    except OSError:
        pass
    finally:
        s.close()
    if len(out) == 11: break
print(" ".join(map(str, out)))')
[ "${#P[@]}" = 11 ] || { echo "not enough free ports in 6400-6499" >&2; exit 2; }
qhttp() { echo "${P[$((3*$1-3))]}"; }
qgrpc() { echo "${P[$((3*$1-2))]}"; }
qurl() { echo "http://127.0.0.1:$(qhttp "$1")"; }

start_node() {  # i [boot|restart]
  local i=$1 extra=()
  mkdir -p "$WORK/n$i"
  if [ "${2:-}" = boot ]; then extra=(--bootstrap "http://127.0.0.1:${P[2]}"); fi
  if [ "${2:-}" != restart ]; then extra+=(--uri "http://127.0.0.1:${P[$((3*i-1))]}"); fi
  echo "--- $(date +%T) start node $i ${2:-} (${extra[*]})" >>"$WORK/n$i/log"
  env -C "$WORK/n$i" QDRANT__SERVICE__HOST=127.0.0.1 QDRANT__SERVICE__HTTP_PORT="$(qhttp "$i")" \
    QDRANT__SERVICE__GRPC_PORT="$(qgrpc "$i")" QDRANT__CLUSTER__ENABLED=true \
    QDRANT__CLUSTER__P2P__PORT="${P[$((3*i-1))]}" QDRANT__TELEMETRY_DISABLED=true \
    QDRANT__STORAGE__STORAGE_PATH="$WORK/n$i/storage" \
    QDRANT__STORAGE__SNAPSHOTS_PATH="$WORK/n$i/snapshots" \
    "$QBIN" "${extra[@]}" >>"$WORK/n$i/log" 2>&1 &
  QPID[$i]=$!
  echo "node $i pid ${QPID[$i]} http $(qhttp "$i") grpc $(qgrpc "$i") p2p ${P[$((3*i-1))]} ${2:-}"
}
wait_node() {
  for _ in $(seq 1 180); do curl -sf -m 2 "$(qurl "$1")/readyz" >/dev/null && return 0
    kill -0 "${QPID[$1]}" 2>/dev/null || break; sleep 1; done
  echo "node $1 not ready"; grep -v '^ *at \|^ *[0-9]*: ' "$WORK/n$1/log" | tail -8
  if grep -q 'is ahead of replay target' "$WORK/n$1/log"; then
    echo "NOTE: Qdrant itself panicked loading its shard after kill -9: a debug_assert in"
    echo "  LocalShard::load_from_wal (qdrant 1.18.3, lib/collection/src/shards/local_shard/mod.rs),"
    echo "  qdrant/qdrant#9844, fixed upstream by #9851. It fires only in debug builds (this binary"
    echo "  is a dev-profile build); a release build replays on. Not a Cairn failure."
  fi
  return 1
}
kill_node() {  # i: kill -9, prints the time
  kill -9 "${QPID[$1]}"; wait "${QPID[$1]}" 2>/dev/null || true; unset "QPID[$1]"
  echo "--- $(date +%T) killed -9" >>"$WORK/n$1/log"
}

start_cairn() {  # name node
  local name=$1 node=$2 port
  if [ "$name" = A ]; then port=${P[9]}; else port=${P[10]}; fi
  mkdir -p "$WORK/cairn-$name"
  env CAIRN_HOME="${CAIRN_HOME:-$REPO/.cache}" CAIRN_QDRANT_URL="http://127.0.0.1:$(qgrpc "$node")" \
    CAIRN_QDRANT_COLLECTION=$COLL CAIRN_QDRANT_SHARDS=2 CAIRN_QDRANT_REPLICATION=2 \
    CAIRN_LOG="${CAIRN_LOG:-warn,cairn=info}" \
    "$CAIRN" serve --data-dir "$WORK/cairn-$name/data" --addr "127.0.0.1:$port" \
    >>"$WORK/cairn-$name/log" 2>&1 &
  CPID[$name]=$!; CURL[$name]="http://127.0.0.1:$port"
  echo "cairn $name pid ${CPID[$name]} on ${CURL[$name]} -> node $node (grpc $(qgrpc "$node"))"
  for _ in $(seq 1 240); do
    curl -sf -m 2 "${CURL[$name]}/healthz" >/dev/null && return 0
    kill -0 "${CPID[$name]}" 2>/dev/null || break; sleep 0.5
  done
  echo "cairn $name did not start"; tail -20 "$WORK/cairn-$name/log"; return 1
}

# ---------------------------------------------------------------- HTTP helpers
# req METHOD URL [JSON]: prints the status (000: no answer), the body is in $RESP.
req() {
  local code
  code=$(curl -s -m "${REQ_TIMEOUT:-90}" -o "$RESP" -w '%{http_code}' -X "$1" \
    -H 'Content-Type: application/json' ${3:+--data-binary "$3"} "$2") || true
  [ -n "$code" ] && [ "$code" != 000 ] || { code=000; : >"$RESP"; }
  echo "$code"
}
errcode() { jq -r '.error.code // empty' "$RESP" 2>/dev/null || true; }
scope() { jq -cn --arg t $T --arg u $U --arg n "$1" '{tenant:$t, user:$u, namespace:$n}'; }
qs() { echo "tenant=$T&user=$U&namespace=$1"; }
letters() { local n=$1 s="" a=abcdefghijklmnopqrstuvwxyz; for _ in 1 2 3; do s="${a:$((n%26)):1}$s"; n=$((n/26)); done; echo "$s"; }
TOPICS=(
  "The lighthouse keeper on Skerry Island winds the fog horn clockwork every four hours when fog rolls in from the north sea."
  "A sourdough starter needs rye flour, water at twenty six degrees and a feeding every twelve hours before the bread is baked."
  "The Aletsch glacier retreats about fifty metres a year; meltwater carves blue moulins into the ice in August."
  "In the Sicilian defence black answers the king pawn with the c-pawn and fights for the d4 square from the flank."
  "Beekeepers smoke the hive entrance gently, lift the frames one by one and look for capped brood and the queen."
  "The night ferry to Stromness leaves at eleven, carries forty cars and serves porridge at breakfast on the upper deck."
  "Tomato seedlings are hardened off for a week outdoors before planting, and pinched out above the fifth truss."
  "The observatory dome turns on a rail of steel wheels; astronomers open the slit only when humidity is under eighty percent."
)

# write_doc VIA NS PHASE I: one document with a unique marker; prints the status.
write_doc() {
  local via=$1 ns=$2 phase=$3 i=$4 marker body code
  marker="quillon${phase}$(letters "$i")"
  body=$(jq -cn --argjson s "$(scope "$ns")" --arg src "field-$phase-$i.txt" \
    --arg text "Field report $marker. ${TOPICS[$((i % ${#TOPICS[@]}))]} (entry $i of phase $phase, $marker)" \
    '{scope:$s, source:$src, text:$text, media_type:"text/plain"}')
  code=$(req POST "${CURL[$via]}/v1/documents" "$body")
  if [ "${code:0:1}" = 2 ]; then
    printf 'doc\t%s\t%s\t%s\t%s\t%s\n' "$ns" "$(jq -r .doc_id "$RESP")" "$marker" "$phase" "$via" >>"$ACKED"
  fi
  echo "$code"
}
# write_msg VIA NS PHASE I: one keyed message with a unique marker; prints the status.
write_msg() {
  local via=$1 ns=$2 phase=$3 i=$4 marker body code
  marker="murrelet${phase}$(letters "$i")"
  body=$(jq -cn --argjson s "$(scope "$ns")" --arg c "conv-$phase" --arg m "m-$phase-$i" \
    --arg content "Note $marker: remember item $i of phase $phase." \
    '{scope:$s, messages:[{conversation_id:$c, role:"user", content:$content, message_id:$m}]}')
  code=$(req POST "${CURL[$via]}/v1/messages" "$body")
  if [ "${code:0:1}" = 2 ]; then
    printf 'msg\t%s\t%s\t%s\t%s\t%s\n' "$ns" "$(jq -r '.receipts[0].id' "$RESP")" "$marker" "$phase" "$via" >>"$ACKED"
  fi
  echo "$code"
}
# recall VIA NS QUERY [KINDS_JSON]: prints the status; body in $RESP.
recall() {
  local body
  body=$(jq -cn --argjson s "$(scope "$2")" --arg q "$3" --argjson k "${4:-null}" \
    '{scope:$s, query:$q, token_budget:1500} + (if $k then {filters:{kinds:$k}} else {} end)')
  req POST "${CURL[$1]}/v1/recall" "$body"
}
cited() { jq -r '[.citations[].ref] | sort | join(" ")' "$RESP"; }
# retry_req METHOD URL [JSON]: retries 503/000 for up to 45 s; prints the final status.
retry_req() {
  local code t0; t0=$(now_ms)
  while :; do
    code=$(req "$@")
    case $code in 503|000) [ $(( $(now_ms) - t0 )) -lt 45000 ] || break; sleep 1 ;; *) break ;; esac
  done
  echo "$code"
}

# ---------------------------------------------------------------- cluster helpers
declare -A PEER NODE_OF
# layout VIEW_NODE: lines "shard node state points" (points only for the node's own replicas).
layout() {
  local args=() i
  for i in "${!PEER[@]}"; do args+=("${PEER[$i]}=n$i"); done
  curl -sf -m 10 "$(qurl "$1")/collections/$COLL/cluster" | python3 -c '
import json, sys
m = dict(a.split("=") for a in sys.argv[1:])
d = json.load(sys.stdin)["result"]
me = m.get(str(d["peer_id"]), str(d["peer_id"]))
rows = [(s["shard_id"], me, s["state"], s["points_count"]) for s in d["local_shards"]]
rows += [(s["shard_id"], m.get(str(s["peer_id"]), str(s["peer_id"])), s["state"], "-") for s in d["remote_shards"]]
for r in sorted(rows): print(*r)
' "${args[@]}"
}
show_layout() { # VIEW_NODE
  local l; l=$(layout "$1" 2>/dev/null) || { echo "  (node $1: no cluster info)"; return 0; }
  echo "  view of node $1: $(echo "$l" | awk '{printf "shard %s@%s %s%s; ", $1, $2, $3, ($4=="-"?"":" ("$4" pts)")}')"
}
all_active() { local w; [ -n "$1" ] || return 1; for w in $1; do [[ $w == *:Active ]] || return 1; done; }
# wait_active VIEW_NODE NODE: until NODE's replicas are Active in VIEW_NODE's view (and in its
# own view when it is up); prints each change of states; sets WAITED_MS.
wait_active() {
  local view=$1 node=$2 t0 last="" cur own
  t0=$(now_ms)
  while :; do
    cur=$(layout "$view" 2>/dev/null | awk -v n="n$node" '$2==n {printf "%s:%s ", $1, $3}') || cur=""
    own=$(layout "$node" 2>/dev/null | awk -v n="n$node" '$2==n {printf "%s:%s ", $1, $3}') || own="(down)"
    if [ "$cur|$own" != "$last" ]; then
      echo "  +$(secs "$t0" "$(now_ms)") s node $node replicas, seen by node $view: ${cur:-?} own view: ${own:-?}"
      last="$cur|$own"
    fi
    if all_active "$cur" && all_active "$own"; then break; fi
    [ $(( $(now_ms) - t0 )) -lt 180000 ] || { WAITED_MS=$(( $(now_ms) - t0 )); return 1; }
    sleep 1
  done
  WAITED_MS=$(( $(now_ms) - t0 ))
}

# ---------------------------------------------------------------- verification
# verify VIA LABEL: every acknowledged write is read back through cairn VIA. Sets LOST.
verify() {
  local via=$1 label=$2 kind ns id marker phase wvia code n=0 docs=0 msgs=0 t0
  LOST=0; t0=$(now_ms)
  while IFS=$'\t' read -r kind ns id marker phase wvia; do
    n=$((n+1))
    if [ "$kind" = doc ]; then
      docs=$((docs+1))
      code=$(retry_req GET "${CURL[$via]}/v1/documents/$id/chunks?$(qs "$ns")")
      if [ "$code" != 200 ] || ! jq -e --arg m "$marker" 'any(.chunks[]; .text | contains($m))' "$RESP" >/dev/null; then
        LOST=$((LOST+1)); fail "$label: document $id ($marker, $phase via $wvia) chunks: $code $(head -c 200 "$RESP")"; continue
      fi
      # The marker is quoted: an identifier probe (verbatim match) besides dense and BM25. A bare
      # one-word query misses some of these made-up words on every backend, the embedded one too
      # (e.g. `quillonbaaa`: no BM25 hit; `"quillonbaaa"` or `quillonbaaa lighthouse`: rank 1).
      code=$(retry_req POST "${CURL[$via]}/v1/recall" \
        "$(jq -cn --argjson s "$(scope "$ns")" --arg q "\"$marker\"" '{scope:$s, query:$q, token_budget:1500, filters:{kinds:["chunk"]}}')")
      if [ "$code" != 200 ] || ! jq -e --arg d "$id" 'any(.citations[]; .doc_id == $d)' "$RESP" >/dev/null; then
        LOST=$((LOST+1)); fail "$label: recall of $marker does not cite document $id: $code $(cited 2>/dev/null | head -c 200)"; continue
      fi
    else
      msgs=$((msgs+1))
      code=$(retry_req GET "${CURL[$via]}/v1/messages/$id?$(qs "$ns")")
      if [ "$code" != 200 ] || ! jq -e --arg m "$marker" '.content | contains($m)' "$RESP" >/dev/null; then
        LOST=$((LOST+1)); fail "$label: message $id ($marker, $phase via $wvia): $code $(head -c 200 "$RESP")"; continue
      fi
    fi
  done <"$ACKED"
  echo "  $label: $n acknowledged writes checked via cairn $via ($docs documents: chunks + recall of the quoted marker; $msgs messages), lost: $LOST ($(secs "$t0" "$(now_ms)") s)"
  [ "$LOST" = 0 ]
}
BASE_QUERY="How does the lighthouse keeper deal with fog?"
# baseline_recall VIA LABEL: the baseline recall cites the same refs as at the start.
baseline_recall() {
  local code refs
  code=$(retry_req POST "${CURL[$1]}/v1/recall" \
    "$(jq -cn --argjson s "$(scope base)" --arg q "$BASE_QUERY" '{scope:$s, query:$q, token_budget:1500}')")
  refs=$( [ "$code" = 200 ] && cited || echo "-")
  if [ "$code" = 200 ] && [ "$refs" = "$BASE_REFS" ]; then ok "$2: baseline recall 200, same $(wc -w <<<"$refs") citations"
  else fail "$2: baseline recall $code, citations [$refs] vs [$BASE_REFS]"; fi
}

# ---------------------------------------------------------------- node 1 (cairn A's URL) down
# cairn_a_down: node 1 was just killed (at T_K6): cairn A has no other URL, so it must answer
# 503 `unavailable` (not 500, not a hang); cairn B (connected to node V1) keeps working.
P6_RAN=""
cairn_a_down() {
  local k t code ec
  P6_RAN=1; P6_A_CODES=()
  for k in 1 2 3; do
    t=$(now_ms); code=$(recall A base "$BASE_QUERY"); ec=$(errcode)
    P6_A_CODES+=("$code/${ec:-ok}/$(secs "$t" "$(now_ms)")s")
    echo "  cairn A recall #$k, +$(secs "$T_K6" "$t") s after the kill: $code $ec in $(secs "$t" "$(now_ms)") s $( [ "$code" = 200 ] || jq -r .error.message "$RESP" | head -c 100)"
    case $code in
      503) [ "$ec" = unavailable ] && ok "cairn A answers 503 unavailable while its node is down" || fail "cairn A 503 with code $ec" ;;
      200) ok "cairn A still answered 200 (unexpected but fine)" ;;
      *) fail "cairn A answered $code $ec with its node down (expected 503 unavailable after the ~6 s of retries): $(head -c 300 "$RESP")" ;;
    esac
    sleep 1
  done
  P6_A_RECALL="${P6_A_CODES[*]}"
  code=$(req GET "${CURL[A]}/readyz"); P6_A_READY="$code $(errcode)"
  echo "  cairn A /readyz: $P6_A_READY"
  [ "$code" = 503 ] || fail "cairn A /readyz with its node down: $code (expected 503)"
  t=$(now_ms); code=$(write_doc A limit a 0); P6_A_WRITE="$code $(errcode) after $(secs "$t" "$(now_ms)") s"
  echo "  cairn A document write: $P6_A_WRITE"
  case $code in 2??|503) ;; *) fail "cairn A write with its node down: $code $(head -c 300 "$RESP")" ;; esac
  code=$(recall B base "$BASE_QUERY")
  [ "$code" = 200 ] && [ "$(cited)" = "$BASE_REFS" ] && ok "cairn B (node $V1) recall 200, same citations" || fail "cairn B recall with node 1 down: $code"
  for k in 0 1 2; do
    for kind in doc msg; do
      code=$(write_$kind B limit b "$k")
      case $code in 2??) inc p6_2xx ;; 503) inc p6_503 ;; *) inc p6_other; fail "cairn B $kind write with node 1 down: $code" ;; esac
    done
  done
  echo "  cairn B writes with node 1 down: 2xx ${CNT[p6_2xx]:-0}, 503 ${CNT[p6_503]:-0}"
}
# cairn_a_back T_RESTART: node 1 is restarting: cairn A serves again without being restarted.
cairn_a_back() {
  local code
  while :; do
    code=$(recall A base "$BASE_QUERY"); [ "$code" = 200 ] && break
    [ $(( $(now_ms) - $1 )) -lt 120000 ] || break; sleep 1
  done
  P6_RECOVER=$(secs "$1" "$(now_ms)")
  [ "$code" = 200 ] && ok "cairn A serves again ${P6_RECOVER} s after node 1 was restarted (no Cairn restart)" \
    || fail "cairn A still $code 120 s after node 1 was restarted"
}

T_START=$(now_ms)
# ================================================================= phase 1
hr "phase 1: 3-node Qdrant cluster ($QBIN), work dir $WORK"
start_node 1; wait_node 1
start_node 2 boot; wait_node 2
start_node 3 boot; wait_node 3
for _ in $(seq 1 60); do
  n=$(curl -s -m 5 "$(qurl 1)/cluster" | jq '.result.peers | length' 2>/dev/null || echo 0)
  [ "$n" = 3 ] && break; sleep 1; done
[ "$n" = 3 ] || { echo "cluster has $n peers, not 3"; exit 1; }
for i in 1 2 3; do
  PEER[$i]=$(curl -s -m 5 "$(qurl "$i")/cluster" | python3 -c 'import json,sys; print(json.load(sys.stdin)["result"]["peer_id"])')
  NODE_OF[${PEER[$i]}]=$i
done
ok "3 peers after $(secs "$T_START" "$(now_ms)") s: n1=${PEER[1]} n2=${PEER[2]} n3=${PEER[3]}"

# ================================================================= phase 2
hr "phase 2: cairn A -> node 1, collection $COLL (2 shards, replication 2)"
start_cairn A 1
code=$(retry_req GET "${CURL[A]}/readyz")
jq -c . "$RESP"
if [ "$code" = 200 ] && [ "$(jq -r .backend "$RESP")" = qdrant ] && [ "$(jq -r .collection "$RESP")" = $COLL ]; then
  ok "/readyz: backend qdrant, store $(jq -r .store "$RESP"), collection $COLL"
else fail "/readyz $code: $(cat "$RESP")"; exit 1; fi
for _ in $(seq 1 60); do
  L=$(layout 1 2>/dev/null || true)
  [ "$(echo "$L" | grep -c ' Active ')" = 4 ] && break; sleep 1; done
show_layout 1
SHARDS=$(echo "$L" | awk '{print $1}' | sort -u | wc -l)
BADSHARD=$(echo "$L" | awk '{c[$1]++; n[$1" "$2]=1} END {for (s in c) if (c[s] != 2) print s; }')
if [ "$SHARDS" = 2 ] && [ "$(echo "$L" | grep -c ' Active ')" = 4 ] && [ -z "$BADSHARD" ] \
   && [ "$(echo "$L" | awk '{print $1, $2}' | sort -u | wc -l)" = 4 ]; then
  ok "2 shards x 2 Active replicas on distinct nodes; replicas per node: $(echo "$L" | awk '{c[$2]++} END {for (n in c) printf "%s=%d ", n, c[n]}')"
else fail "layout is not 2 shards x 2 Active replicas: $(echo "$L" | tr '\n' ';')"; exit 1; fi
SHARD_PARAMS=$(curl -s "$(qurl 2)/collections/$COLL" | jq -c '.result.config.params | {shard_number, replication_factor, write_consistency_factor}')
echo "  collection params (node 2): $SHARD_PARAMS"

# ================================================================= phase 3
hr "phase 3: baseline writes and recall (namespace base)"
for i in 0 1 2 3 4 5; do c=$(write_doc A base b "$i"); [ "${c:0:1}" = 2 ] || fail "baseline document $i: $c $(cat "$RESP")"; done
for i in 0 1 2 3; do c=$(write_msg A base b "$i"); [ "${c:0:1}" = 2 ] || fail "baseline message $i: $c $(cat "$RESP")"; done
ok "acknowledged: $(wc -l <"$ACKED") baseline writes"
code=$(recall A base "$BASE_QUERY")
[ "$code" = 200 ] || { fail "baseline recall: $code $(cat "$RESP")"; exit 1; }
BASE_REFS=$(cited)
ok "baseline recall cites: $BASE_REFS (coverage $(jq -r '.coverage | if type=="object" then (.level // .status // tostring) else . end' "$RESP"))"
sleep 1; show_layout 1

# ================================================================= phase 4
# V1: a node other than 1 that holds replicas (prefer node 3).
V1=""
for c in 3 2; do echo "$L" | awk '{print $2}' | grep -qx "n$c" && { V1=$c; break; }; done
[ -n "$V1" ] || { fail "neither node 2 nor node 3 holds a replica"; exit 1; }
hr "phase 4: kill -9 node $V1 (replicas: $(echo "$L" | awk -v n="n$V1" '$2==n {printf "shard %s ", $1}'))"
T_KILL1=$(now_ms); kill_node "$V1"
echo "  killed node $V1 at $(date +%T)"
# Recall at once, retrying a 503 for up to 30 s.
REC_CODES=()
while :; do
  t=$(now_ms); code=$(recall A base "$BASE_QUERY"); REC_CODES+=("$code")
  echo "  recall +$(secs "$T_KILL1" "$t") s: $code $(errcode) ($(secs "$t" "$(now_ms)") s)"
  [ "$code" = 200 ] && break
  [ "$code" = 503 ] && [ "$(errcode)" = unavailable ] || { fail "recall after kill answered $code $(head -c 300 "$RESP")"; break; }
  [ $(( $(now_ms) - T_KILL1 )) -lt 30000 ] || { fail "recall still 503 30 s after the kill"; break; }
  sleep 1
done
RECALL1_OK_S=$(secs "$T_KILL1" "$(now_ms)")
if [ "$code" = 200 ]; then
  [ "$(cited)" = "$BASE_REFS" ] && ok "recall 200 after ${RECALL1_OK_S} s with the same citations" \
    || fail "recall after the kill cites [$(cited)] instead of [$BASE_REFS]"
fi
echo "  writing documents and messages through cairn A for ${OUTAGE_WRITE_SECS} s (namespace outage)"
i=0; FIRST_W2XX=""; W_END=$(( $(now_ms) + OUTAGE_WRITE_SECS * 1000 )); MAXLAT=0
while [ "$(now_ms)" -lt "$W_END" ]; do
  for kind in doc msg; do
    t=$(now_ms)
    code=$(write_$kind A outage o "$i"); lat=$(( $(now_ms) - t )); [ $lat -gt $MAXLAT ] && MAXLAT=$lat
    case $code in
      2??) inc p4_2xx; [ -n "$FIRST_W2XX" ] || FIRST_W2XX=$(secs "$T_KILL1" "$(now_ms)") ;;
      503) inc p4_503; echo "  $kind $i: 503 $(errcode) after ${lat} ms: $(jq -r .error.message "$RESP" | head -c 160)" ;;
      *) inc p4_other; fail "$kind $i during the outage: $code $(head -c 300 "$RESP")" ;;
    esac
  done
  if [ $((i % 5)) = 4 ]; then
    code=$(recall A base "$BASE_QUERY")
    case $code in 200) inc p4_rec200; [ "$(cited)" = "$BASE_REFS" ] || fail "recall during the outage cites [$(cited)]" ;;
      503) inc p4_rec503 ;; *) fail "recall during the outage: $code" ;; esac
  fi
  i=$((i+1))
done
P4_ATTEMPTS=$((2*i))
echo "  outage writes: $P4_ATTEMPTS attempted, 2xx ${CNT[p4_2xx]:-0}, 503 ${CNT[p4_503]:-0}, other ${CNT[p4_other]:-0}; first 2xx write +${FIRST_W2XX:-never} s after the kill; slowest write ${MAXLAT} ms; recalls 200 ${CNT[p4_rec200]:-0}, 503 ${CNT[p4_rec503]:-0}"
[ "${CNT[p4_2xx]:-0}" -gt 0 ] || fail "no write succeeded while node $V1 was down"
show_layout 1
verify A "node $V1 down" || true

# ================================================================= phase 5
hr "phase 5: restart node $V1 on its storage, wait until it caught up"
T_RESTART1=$(now_ms)
start_node "$V1" restart; wait_node "$V1"
echo "  node $V1 answers /readyz after $(secs "$T_RESTART1" "$(now_ms)") s"
if wait_active 1 "$V1"; then CATCHUP1_S=$(secs "$T_RESTART1" "$(now_ms)"); ok "node $V1 replicas Active $CATCHUP1_S s after its restart"
else CATCHUP1_S=never; fail "node $V1 replicas not Active after 180 s"; fi
show_layout 1; show_layout "$V1"
# Replica sizes as each holder counts them (Qdrant's estimate, for information).
for s in $(echo "$L" | awk '{print $1}' | sort -u); do
  sizes=""
  for n in 1 2 3; do sizes+=$(layout "$n" 2>/dev/null | awk -v s="$s" -v n="n$n" '$1==s && $2==n {printf "n%s=%s ", substr(n,2), $4}' || true); done
  echo "  shard $s points per replica: $sizes"
done
L=$(layout 1)
PARTNERS=$(echo "$L" | awk -v v="n$V1" '$2==v {s[$1]=1} {r[$1]=r[$1]" "$2} END {for (x in s) print r[x]}' \
  | tr ' ' '\n' | grep -v "^n$V1\$" | grep . | sort -u | sed 's/^n//' | tr '\n' ' ')
echo "  nodes sharing a shard with node $V1: $PARTNERS"
start_cairn B "$V1"
code=$(retry_req GET "${CURL[B]}/readyz"); [ "$code" = 200 ] || fail "cairn B /readyz: $code $(cat "$RESP")"
j=0
for V2 in $PARTNERS; do
  hr "phase 5: kill -9 node $V2 (node $V1 is now the only live copy of shard(s) $(echo "$L" | awk -v a="n$V1" -v b="n$V2" '$2==a {x[$1]++} $2==b {x[$1]++} END {for (s in x) if (x[s]==2) printf "%s ", s}'))"
  T_K=$(now_ms); kill_node "$V2"
  sleep 1
  baseline_recall B "node $V2 down, via node $V1"
  verify B "node $V2 down, read via node $V1" || true
  for k in 0 1 2; do
    for kind in doc msg; do
      code=$(write_$kind B catchup "c$V2" "$j")
      case $code in 2??) inc p5_2xx ;; 503) inc p5_503 ;; *) inc p5_other; fail "$kind write with node $V2 down: $code $(head -c 300 "$RESP")" ;; esac
    done; j=$((j+1))
  done
  echo "  writes via cairn B with node $V2 down: 2xx ${CNT[p5_2xx]:-0}, 503 ${CNT[p5_503]:-0}"
  if [ "$V2" = 1 ] && [ "$PHASE6" = 1 ]; then
    # Node 1 is cairn A's URL: check phase 6 now rather than kill node 1 a second time.
    echo "  node 1 is cairn A's URL: the phase 6 checks run now"
    T_K6=$T_K; cairn_a_down
  elif [ "$V2" = 1 ]; then
    code=$(recall A base "$BASE_QUERY"); echo "  cairn A (connected to the dead node 1): recall $code $(errcode) (not checked: CLUSTER_TEST_PHASE6=0)"
  fi
  T_R=$(now_ms); start_node "$V2" restart; wait_node "$V2"
  [ "$V2" = 1 ] && [ "$PHASE6" = 1 ] && cairn_a_back "$T_R"
  if wait_active 1 "$V2"; then ok "node $V2 back and Active $(secs "$T_R" "$(now_ms)") s after its restart"
  else fail "node $V2 replicas not Active after 180 s"; fi
done

# ================================================================= phase 6
if [ "$PHASE6" = 1 ] && [ -z "$P6_RAN" ]; then
  hr "phase 6: kill -9 node 1, the node cairn A is connected to (documented limitation: no fail-over)"
  show_layout 2
  T_K6=$(now_ms); kill_node 1
  cairn_a_down
  T_R6=$(now_ms); start_node 1 restart; wait_node 1
  cairn_a_back "$T_R6"
  if wait_active 2 1; then ok "node 1 replicas Active again"; else fail "node 1 replicas not Active"; fi
fi

# ================================================================= final
hr "final: all nodes up, everything acknowledged read back through cairn A"
show_layout 1; show_layout 2; show_layout 3
baseline_recall A "final"
verify A "final" || true
for ns in $(cut -f2 "$ACKED" | sort -u); do
  code=$(retry_req GET "${CURL[A]}/v1/stats?$(qs "$ns")")
  acked_docs=$(awk -F'\t' -v n="$ns" '$1=="doc" && $2==n' "$ACKED" | wc -l)
  acked_msgs=$(awk -F'\t' -v n="$ns" '$1=="msg" && $2==n' "$ACKED" | wc -l)
  echo "  /v1/stats namespace $ns: $code $(jq -c '{documents, chunks, messages}' "$RESP" 2>/dev/null) (acknowledged: $acked_docs documents, $acked_msgs messages)"
  if [ "$code" != 200 ] || [ "$(jq .documents "$RESP")" -lt "$acked_docs" ] || [ "$(jq .messages "$RESP")" -lt "$acked_msgs" ]; then
    fail "stats of $ns below the acknowledged writes"; fi
done
code=$(req GET "${CURL[A]}/readyz"); echo "  /readyz: $(jq -c . "$RESP")"

hr "summary"
echo "  qdrant: $QBIN, 3 nodes, collection $COLL $SHARD_PARAMS"
echo "  acknowledged writes (2xx): $(wc -l <"$ACKED") total ($(grep -c '^doc' "$ACKED") documents, $(grep -c '^msg' "$ACKED") messages); lost in the final read-back: ${LOST}"
echo "  phase 4 (node $V1 killed): recall statuses ${REC_CODES[*]}, 200 after ${RECALL1_OK_S} s;"
echo "    writes ${P4_ATTEMPTS}: 2xx ${CNT[p4_2xx]:-0}, 503 ${CNT[p4_503]:-0}, other ${CNT[p4_other]:-0}; first 2xx +${FIRST_W2XX:-never} s; slowest ${MAXLAT} ms"
echo "  phase 5: node $V1 Active ${CATCHUP1_S} s after restart; partners killed: ${PARTNERS}; writes 2xx ${CNT[p5_2xx]:-0}, 503 ${CNT[p5_503]:-0}"
if [ -n "$P6_RAN" ]; then
  echo "  phase 6 (node 1 = cairn A's URL killed): cairn A recall ${P6_A_RECALL}, write ${P6_A_WRITE}, /readyz ${P6_A_READY}; cairn B writes 2xx ${CNT[p6_2xx]:-0}, 503 ${CNT[p6_503]:-0}; cairn A recovered ${P6_RECOVER} s after restart"
fi
echo "  total time: $(secs "$T_START" "$(now_ms)") s"
if [ "${#FAILS[@]}" = 0 ]; then
  echo "PASS: every check passed"
else
  echo "FAILED checks (${#FAILS[@]}):"; printf '  - %s\n' "${FAILS[@]}"
  exit 1
fi
