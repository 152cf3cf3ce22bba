#!/usr/bin/env bash
# Installs the Debian packages glm53's build and tests need, when any is missing (make demo / make test /
# .ci/run call this first). Needs root or sudo only when something is missing. The CUDA toolkit is not a
# Debian package here: it is expected under /usr/local/cuda and the build skips the CUDA backend without it.
set -euo pipefail

packages=(
  build-essential cmake pkg-config          # the C build
  libcjson-dev libpcre2-dev libstb-dev      # config/JSON parsing, tokenizer regex, image decoding
  luajit libluajit-5.1-dev luarocks         # the Lua package and its rockspec
  lua-cjson lua-luv lua-busted              # Lua JSON, event loop (server), Lua tests
  curl                                      # the client in the server's black-box tests
  tmux                                      # a real terminal for the glm53 chat / generate tests
  lua-rex-pcre2                             # Python-compatible regexes for the eval tasks (evals/)
  libcmark0.30.2 libcmark-dev               # Markdown to HTML for eval and benchmark reports (FFI)
  chromium                                  # headless screenshots of the HTML reports in the tests
  clang libclang-rt-14-dev                  # libFuzzer and sanitizers for the loader fuzz target
  chromium                                  # the chat page test (headless, through playwright-core)
)
# The server's client tests run the OpenAI / Anthropic npm clients on Node (20 or later): Debian's nodejs and npm
# when no node is installed (a NodeSource node brings its own npm, which Debian's npm package would conflict with).
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "bootstrap: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "bootstrap: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "bootstrap: done"
