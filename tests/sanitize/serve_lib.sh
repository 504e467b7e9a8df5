# shellcheck shell=sh disable=SC2154   # $mend, $src and $name: the sourcing script's
# serve_lib: what the leak-checked runs of mend's server share (serve_close.sh, serve_wait.sh),
# sourced with $mend, $src and $name (the script's, for its messages) set: a directory of the
# run's own, removed at exit, with an empty workflows folder; the server started under
# LeakSanitizer on a free loopback port; its stop (SIGINT) judged. Must never: leave the
# server or the client running once the script ends.

# $dir: /tmp/mend-$name-XXXXXX, removed when the script exits; $dir/wf for the workflows.
serve_workspace() {
  dir=$(mktemp -d "/tmp/mend-$name-XXXXXX")
  trap 'rm -rf "$dir"' EXIT
  mkdir "$dir/wf"
}

# Starts `mend COMMAND --db --listen 127.0.0.1:0 --workflows ARGS...` in the background
# ($server), leaks checked for this process alone (its engine and Lua state are freed before
# it exits); sets $port once it says where it listens, or exits 1 saying why.
serve_start() {
  serve_cmd=$1
  shift
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=0" MEND_LUA_DIR="$src/lua" \
    "$mend" "$serve_cmd" --db "$dir/mend.db" --listen 127.0.0.1:0 --workflows "$dir/wf" "$@" \
    >"$dir/out" 2>"$dir/err" &
  server=$!
  port=""
  for _ in $(seq 1 200); do
    port=$(sed -n 's|^mend: serving http://127\.0\.0\.1:\([0-9]*\)/api/v1$|\1|p' "$dir/out")
    [ -n "$port" ] && break
    sleep 0.1
  done
  if [ -z "$port" ]; then
    echo "$name: mend $serve_cmd did not listen:"; cat "$dir/out" "$dir/err"; kill "$server"; exit 1
  fi
}

# Stops the server (SIGINT) while the client (process CLIENT, its output in $dir/client) holds
# what it holds, then the client; exits 1 unless the server exited 0 with no leak reported.
serve_stop() {
  kill -INT "$server"
  wait "$server"
  rc=$?
  kill "$1" 2>/dev/null
  wait "$1" 2>/dev/null
  if [ "$rc" -ne 0 ] || grep -q "LeakSanitizer" "$dir/err"; then
    echo "$name: mend $serve_cmd exited $rc:"; cat "$dir/client" "$dir/err"; exit 1
  fi
  echo "$name: no leak"
}
