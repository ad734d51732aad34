# Sourced by the study scripts: `timed NAME COMMAND…` runs COMMAND under /usr/bin/time, its
# standard output to $out/NAME.json and its wall seconds and peak resident memory to
# $out/NAME.time, each written whole (a killed run leaves only .tmp files); it skips a
# run whose two files exist, so a study can be stopped and started again.
timed() {
  local name=$1
  shift
  if [ -s "$out/$name.json" ] && [ -s "$out/$name.time" ]; then
    return
  fi
  echo "$name" >&2
  /usr/bin/time -f '{"wall_s": %e, "peak_rss_kb": %M}' -o "$out/$name.time.tmp" \
    "$@" > "$out/$name.json.tmp"
  mv "$out/$name.json.tmp" "$out/$name.json"
  mv "$out/$name.time.tmp" "$out/$name.time"
}
