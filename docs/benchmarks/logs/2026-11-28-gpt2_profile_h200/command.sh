set -x
python3 - <<'E'
import numpy as np
n = 30 * 16 * 1024 + 1
h = np.zeros(256, np.int32); h[0] = 20240520; h[1] = 1; h[2] = n
t = np.random.default_rng(1).integers(0, 50257, n).astype(np.uint16)
open('/tmp/tok.bin', 'wb').write(h.tobytes() + t.tobytes())
E
bash .gpu/run.sh gpt2 --accelerator gpu --model 124M --vocab 50304 --seq-len 1024 --batch-size 16 --precision bf16-mixed --data /tmp/tok.bin --no-shuffle --max-steps 8 --warmup-steps 0 --lr 6e-4 --no-progress-bar --out /tmp/prof --profiler ops --profiler-dir /tmp/prof/p > $OUT/prof.log 2>&1
echo "gpt2 rc=$?"
cp /tmp/prof/p/fit-ops.csv /tmp/prof/p/fit-ops.txt $OUT/
gzip -c /tmp/prof/p/fit-trace.json > $OUT/fit-trace.json.gz
for b in 8 32; do timeout 60 bash .gpu/run.sh bench_gpt2 --accelerator gpu --model 124M --batch $b --seq 1024 --precision bf16-mixed --steps 10 --warmup 3 --repeats 2; done > $OUT/bench.log 2>&1
cat $OUT/bench.log
tail -80 $OUT/fit-ops.txt
