# Sourced by check_sigterm_peer.sh and check_sigterm_stuck.sh.
# start_training_job <mpiexec> <driver> <np> <run> <log> starts <np> ranks of the rank-kill driver in the background (job=$!) with a collective timeout long
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

# pick_rank <run> <np> <trial> <log>, after start_training_job: a random rank, after a random 0-0.9 s of training,
# as rank and pid. When the job did not start (no pid file, or the job has exited) it says so with the log's tail,
# kills and reaps the job (job=""), and returns 1.
pick_rank() {
  local run="$1" np="$2" t="$3" log="$4"
  rank=$((RANDOM % np))
  sleep "0.$((RANDOM % 10))"
  pid=$(cat "$run/pid.$rank" 2>/dev/null)
  if [ -z "$pid" ] || ! kill -0 "$job" 2>/dev/null; then
    echo "trial $t: the job did not start"; sed 's/^/    | /' "$log" | tail -20
    kill -9 "$job" 2>/dev/null; wait "$job" 2>/dev/null; job=""
    return 1
  fi
}
