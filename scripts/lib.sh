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
