# Sourced by check_sigterm_peer.sh and check_sigterm_stuck.sh: start_training_job <mpiexec> <driver> <np> <run>
# <log> starts <np> ranks of the rank-kill driver in the background (job=$!) with a collective timeout long
# enough that no rank can get away by timing out, and returns once training runs (the first epoch's checkpoint
# and every rank's pid file exist), the job has exited, or 60 s have passed.
start_training_job() {
  local mpiexec="$1" driver="$2" np="$3" run="$4" log="$5"
  VOLT_COLLECTIVE_TIMEOUT=60 "$mpiexec" -np "$np" --oversubscribe "$driver" "$run" 100000 >"$log" 2>&1 &
  job=$!
  for _ in $(seq 600); do
    [ -f "$run/ckpt/last.json" ] && [ "$(ls "$run"/pid.* 2>/dev/null | wc -l)" -eq "$np" ] && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
}
