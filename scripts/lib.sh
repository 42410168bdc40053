# Shared by the scripts: paths of the project-local tools and small helpers. Source it.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
# shellcheck source=tools.env
source "$ROOT/scripts/tools.env"
export PATH="$TOOLS/bin:$HOME/.cargo/bin:$ROOT/node_modules/.bin:$PATH"

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
note() { printf '    %s\n' "$*"; }
die() { printf '\033[31merror:\033[0m %s\n' "$*" >&2; exit 1; }

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

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# start_gateway STATE_DIR PORT LOG [wrangler dev args…]: applies the D1 migrations to STATE_DIR,
# starts `wrangler dev` in its own process group (GATEWAY_PID) and waits until it answers.
# `--test-scheduled` serves GET /__scheduled?cron=… to run a cron handler now (the static assets
# keep /cdn-cgi/handler/scheduled from reaching the worker).
start_gateway() {
  local state="$1" port="$2" log="$3"
  shift 3
  mkdir -p "$state"
  { wrangler d1 migrations apply DB --local --persist-to "$state" \
      && wrangler d1 migrations apply AUDIT_DB --local --persist-to "$state"; } > "$log.migrations" 2>&1 \
    || { cat "$log.migrations"; die "D1 migrations failed"; }
  note "D1 migrations applied ($(grep -oE '[0-9]{4}_[a-z_]+\.sql' "$log.migrations" | sort -u | wc -l) files) in $state"
  setsid wrangler dev --ip 127.0.0.1 --port "$port" \
    --inspector-port "$(free_port)" --persist-to "$state" \
    --show-interactive-dev-session=false --test-scheduled "$@" > "$log" 2>&1 < /dev/null &
  GATEWAY_PID=$!
  local waited=0
  until curl -fs -o /dev/null "http://127.0.0.1:$port/health"; do
    if ! kill -0 "$GATEWAY_PID" 2>/dev/null; then
      tail -n 40 "$log"
      die "wrangler dev exited before it was ready (log: $log)"
    fi
    if [ "$waited" -ge 180 ]; then
      tail -n 40 "$log"
      die "wrangler dev not ready after 180 s (log: $log)"
    fi
    sleep 1
    waited=$((waited + 1))
  done
  note "gateway ready on http://127.0.0.1:$port after ${waited}s (pid $GATEWAY_PID, log $log)"
}

# Stops the process group that start_gateway began (wrangler and its workerd).
stop_gateway() {
  if [ -n "${GATEWAY_PID:-}" ] && kill -0 "$GATEWAY_PID" 2>/dev/null; then
    kill -TERM -- "-$GATEWAY_PID" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$GATEWAY_PID" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$GATEWAY_PID" 2>/dev/null || true
  fi
  GATEWAY_PID=
}
