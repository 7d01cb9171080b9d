# Sourced by the CLI error tests: `expect NAME EXPECTED-TEXT COMMAND...` runs the command (at
# most 120 s) and requires exit status 1 and the text in its "tessera <cmd>: error: ..." line;
# a miss prints what came instead and counts in $fails. $expect_prefix (default: the line starts
# with "tessera <cmd>: ") may be set empty where several ranks' lines interleave.
fails=${fails:-0}
expect_prefix="${expect_prefix-^tessera [a-z0-9-]*: }"
expect() {
  local name="$1" want="$2"; shift 2
  local out status
  out=$(timeout 120 "$@" 2>&1 >/dev/null); status=$?
  if [ "$status" = 1 ] && grep -q "${expect_prefix}error: .*$want" <<<"$out"; then
    echo "ok   $name"
  else
    echo "FAIL $name: exit $status, wanted an error containing '$want', got:"; echo "$out" | tail -3
    fails=$((fails + 1))
  fi
}
