# Shared by the scripts: paths of the project-local tools and small helpers. Source it.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
# shellcheck source=tools.env
source "$ROOT/scripts/tools.env"
export PATH="$TOOLS/bin:$HOME/.cargo/bin:$ROOT/node_modules/.bin:$PATH"

# Each step says when it starts, in seconds since its script did: where a long run spends its time.
step() { printf '\n\033[1m==> %s\033[0m  [%ds]\n' "$*" "$SECONDS"; }
note() { printf '    %s\n' "$*"; }
die() { printf '\033[31merror:\033[0m %s\n' "$*" >&2; exit 1; }

# The failed tests of a `node --test --test-reporter=spec` log, short: each one's name and the
# first lines of its error, without stack frames (CI shows only the end of a run's output).
failing_tests() {
  sed -E 's/\x1b\[[0-9;]*m//g' "$1" | awk '
    /^✖ failing tests:/ { on = 1; next }
    !on { next }
    /^test at / { print "  " $0; shown = 0; next }
    /^✖ / { print "  " $0; shown = 0; next }
    /^ *at / || /^ *$/ || /^ *[{}]/ { next }
    shown < 6 { print "      " substr($0, 1, 200); shown++ }'
}

# The wasm-bindgen library version resolved in Cargo.lock.
wasm_bindgen_version() {
  awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' "$ROOT/Cargo.lock"
}

# A value from .dev.vars (KEY=value lines).
dev_var() {
  sed -n "s/^$1=//p" "$ROOT/.dev.vars" | tr -d '"' | head -n1
}

# No internet here: skip miniflare's Request.cf download and wrangler's metrics.
export CLOUDFLARE_CF_FETCH_ENABLED=false
export WRANGLER_SEND_METRICS=false

# A port on 127.0.0.1 that nothing listens on, for a server started later. Picked below the
# kernel's ephemeral range (Linux 32768–60999, macOS 49152–65535): a port from that range can be
# taken meanwhile as the local end of any outgoing connection (a suite's gateway once failed to
# start so, minutes after its port was picked), one below it only by a server told to. A script
# hands each port out once: it lists them in a file of its own ($$ is the script's PID in its
# subshells too); files a day old are swept.
free_port() {
  local ports="${TMPDIR:-/tmp}/gatehouse-ports.$$"
  find "${TMPDIR:-/tmp}" -maxdepth 1 -name 'gatehouse-ports.*' -mmin +1440 -delete 2>/dev/null || true
  node -e '
    const { createServer } = require("net");
    const { appendFileSync, existsSync, readFileSync } = require("fs");
    const file = process.argv[1];
    const taken = new Set(existsSync(file) ? readFileSync(file, "utf8").split("\n").filter(Boolean).map(Number) : []);
    const attempt = (left) => {
      const port = 20000 + Math.floor(Math.random() * 12000);
      if (taken.has(port)) return attempt(left);
      const s = createServer().once("error", () => {
        if (left > 0) attempt(left - 1); else { console.error("no free port"); process.exit(1); }
      });
      s.listen(port, "127.0.0.1", () => { appendFileSync(file, port + "\n"); console.log(port); s.close(); });
    };
    attempt(50);
  ' "$ports"
}

# The SHA-256 of stdin as "<hex>  -": GNU coreutils' sha256sum, or shasum on macOS and the BSDs.
sha256() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum; else shasum -a 256; fi
}

# The size of a file in bytes (portable; `stat` differs between GNU and BSD).
file_size() {
  wc -c < "$1" | tr -d ' '
}

# d1_bindings CONFIG: the D1 bindings a wrangler.toml declares (DB, AUDIT_DB, AUDIT_DB_1, …).
d1_bindings() {
  grep -A1 -F '[[d1_databases]]' "$1" | sed -nE 's/^binding = "([A-Z0-9_]+)"$/\1/p'
}

# check_config [gatehouse-config-check arguments…]: the configuration parsed by the worker's own
# code, natively, before anything starts or uploads (SPEC §26); dies with the worker's message.
check_config() {
  local verdict
  verdict="$(cd "$ROOT" && cargo run -q -p gatehouse-config-check -- "$@" 2>&1)" || die "$verdict"
  note "$verdict"
}

# start_worker CONFIG STATE_DIR PORT LOG [wrangler dev args…]: applies the D1 migrations of the
# worker that the wrangler.toml CONFIG describes (every D1 binding) to STATE_DIR, starts
# `wrangler dev` in its own process group (WORKER_PID; job control puts a background job in a group
# of its own, on Linux and macOS alike) and waits until it answers GET /health. Its V8 inspector
# (wrangler's proxy to the worker's isolate) listens on WORKER_INSPECTOR_PORT.
# Once it answers, the inspector's Network domain that wrangler turns on is turned off again
# (scripts/quiet-inspector.mjs: it costs every subrequest milliseconds of wrangler's CPU).
# `--test-scheduled` serves GET /__scheduled?cron=… to run a cron handler now.
start_worker() {
  local config="$1" state="$2" port="$3" log="$4"
  shift 4
  mkdir -p "$state"
  local binding
  for binding in $(d1_bindings "$config"); do
    wrangler d1 migrations apply "$binding" --local --persist-to "$state" --config "$config" \
      || { echo "(migrations of $binding)"; false; }
  done > "$log.migrations" 2>&1 || { cat "$log.migrations"; die "D1 migrations failed"; }
  note "D1 migrations applied ($(grep -oE '[0-9]{4}_[a-z_]+\.sql' "$log.migrations" | sort -u | wc -l) files) in $state"
  WORKER_INSPECTOR_PORT="$(free_port)"
  set -m
  wrangler dev --config "$config" --ip 127.0.0.1 --port "$port" \
    --inspector-port "$WORKER_INSPECTOR_PORT" --persist-to "$state" \
    --show-interactive-dev-session=false --test-scheduled "$@" > "$log" 2>&1 < /dev/null &
  WORKER_PID=$!
  set +m
  local waited=0 status
  until status="$(curl -s -o "$log.health" -w '%{http_code}' "http://127.0.0.1:$port/health")" && [ "$status" = 200 ]; do
    if [ "$status" = 503 ] && grep -q "configuration is invalid" "$log.health"; then
      # A configuration the worker refuses (SPEC §26): its own message, at once.
      stop_group "$WORKER_PID"
      die "$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).error.message)' "$log.health")"
    fi
    if ! kill -0 "$WORKER_PID" 2>/dev/null; then
      tail -n 40 "$log"
      die "wrangler dev exited before it was ready (log: $log)"
    fi
    if [ "$waited" -ge 180 ]; then
      tail -n 40 "$log"
      stop_group "$WORKER_PID"
      die "wrangler dev not ready after 180 s (log: $log)"
    fi
    sleep 1
    waited=$((waited + 1))
  done
  node "$ROOT/scripts/quiet-inspector.mjs" "$WORKER_INSPECTOR_PORT" || die "could not turn off the inspector's Network domain"
  note "$(awk -F'"' '/^name = /{ print $2; exit }' "$config") ready on http://127.0.0.1:$port after ${waited}s (pid $WORKER_PID, log $log)"
}

# start_gateway STATE_DIR PORT LOG [wrangler dev args…]: Gatehouse (GATEWAY_PID,
# GATEWAY_INSPECTOR_PORT), as start_worker.
start_gateway() {
  start_worker "$ROOT/wrangler.toml" "$@"
  GATEWAY_PID=$WORKER_PID
  GATEWAY_INSPECTOR_PORT=$WORKER_INSPECTOR_PORT
}

# start_peer STATE_DIR [wrangler dev args…]: the TypeScript peer of the side-by-side benchmark
# (bench/peer; docs/performance.md) on a free port (PEER_PID), with a random token for its
# POST /bench/setup. Exports PEER_URL, PEER_STATE and PEER_SETUP_TOKEN, which scripts/bench.mjs reads.
start_peer() {
  local state="$1" port
  shift
  port="$(free_port)"
  PEER_SETUP_TOKEN="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  start_worker "$ROOT/bench/peer/wrangler.toml" "$state" "$port" "$state/wrangler.log" --var "SETUP_TOKEN:$PEER_SETUP_TOKEN" "$@"
  PEER_PID=$WORKER_PID
  export PEER_URL="http://127.0.0.1:$port" PEER_STATE="$state" PEER_SETUP_TOKEN
}

# worker_processes GROUP_PID: the processes behind a worker that start_worker began, as
# "role=pid …": wrangler (node), the workerd that serves its proxy, and the workerd that runs the
# worker (the one started with an inspector). scripts/profile.mjs and scripts/bench.mjs read their
# CPU time per request from /proc.
worker_processes() {
  local pid ppid comm out=""
  while read -r pid ppid comm; do
    if [ "$comm" = workerd ]; then
      if tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- '--inspector-addr'; then out+=" worker-workerd=$pid"; else out+=" proxy-workerd=$pid"; fi
    elif [ "$comm" = node ] && [ "$ppid" = "$1" ]; then
      out+=" wrangler=$pid"
    fi
  done < <(ps -e -o pid=,ppid=,pgid=,comm= | awk -v g="$1" '$3 == g { print $1, $2, $4 }')
  printf '%s' "${out# }"
}

# stop_group PID: stops the process group of PID (wrangler and its workerd), if it still runs.
stop_group() {
  if [ -n "$1" ] && kill -0 "$1" 2>/dev/null; then
    kill -TERM -- "-$1" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$1" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$1" 2>/dev/null || true
  fi
}

# Stops what start_gateway and start_peer began (and a worker still starting: WORKER_PID).
stop_gateway() {
  stop_group "${GATEWAY_PID:-}"
  stop_group "${PEER_PID:-}"
  stop_group "${WORKER_PID:-}"
  GATEWAY_PID=
  PEER_PID=
}

# start_test_gateway STATE_DIR PORT: the gateway as the tests run it, with the settings of
# tests/e2e/gateway-vars.json (the parity run gives the test kit the same): a tiny trial quota,
# "tiny" and "shared" plans for the quota tests, a "windows" plan of two windows (SPEC §20), a
# "bench" plan of a million requests a minute for the quick benchmark, webhooks to a local receiver
# over http, a retry schedule of seconds, and queue retries 1 s, 2 s, 2 s, … apart (so a message
# exhausts its 10 retries in about half a minute). Further arguments go to wrangler dev
# (scripts/test adds the proxy mode's UPSTREAMS).
start_test_gateway() {
  local state="$1" port="$2" var vars=()
  shift 2
  while IFS= read -r var; do vars+=(--var "$var"); done < <(node -e '
    for (const [name, value] of Object.entries(require(process.argv[1])))
      console.log(`${name}:${typeof value === "string" ? value : JSON.stringify(value)}`);' "$ROOT/tests/e2e/gateway-vars.json")
  [ ${#vars[@]} -gt 0 ] || die "tests/e2e/gateway-vars.json gave no settings"
  start_gateway "$state" "$port" "$state/wrangler.log" "$@" "${vars[@]}"
}
