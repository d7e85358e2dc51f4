#!/usr/bin/env bash
# Regenerates tests/nn/data/gpt2_parity/ (read by tests/nn/test_gpt2_parity.cpp): the PyTorch reference
# (../shared/anchors/gpt2_torch.py, Debian's python3-torch on the CPU) trains GPT-2 "tiny" with a 256-token
# (byte) vocabulary for 50 fp32 steps on the first bytes of examples/corpus/licenses.txt and writes
#   init.safetensors  its initial weights (transformer.wpe cut to the SEQ rows the run uses, see below)
#   tokens.bin        the token stream it consumed (GPT-2 shard format: 256 int32 header, uint16 tokens)
#   losses.json       its JSON line, with every step's loss
# Usage: scripts/make_gpt2_parity_data.sh [path/to/gpt2_torch.py]   (run from anywhere; needs python3 with torch)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REF="${1:-$ROOT/../shared/anchors/gpt2_torch.py}"
OUT="$ROOT/tests/nn/data/gpt2_parity"
PY="${PYTHON:-/usr/bin/python3}"
BATCH=4 SEQ=64 STEPS=50 SEED=1337
mkdir -p "$OUT"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# The corpus's first BATCH*SEQ*STEPS+1 bytes as byte tokens, in the shard format.
"$PY" - "$ROOT/examples/corpus/licenses.txt" "$TMP/corpus.bin" $((BATCH * SEQ * STEPS + 1)) <<'PYEOF'
import sys
import numpy as np
text, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
toks = np.frombuffer(open(text, "rb").read()[:n], dtype=np.uint8).astype(np.uint16)
assert len(toks) == n, f"{text} has fewer than {n} bytes"
head = np.zeros(256, dtype=np.int32)
head[0], head[1], head[2] = 20240520, 1, n
with open(out, "wb") as f:
    f.write(head.tobytes())
    f.write(toks.tobytes())
PYEOF

"$PY" "$REF" --device cpu --model tiny --vocab 256 --batch $BATCH --seq $SEQ --steps $STEPS --warmup 0 \
  --mode eager --precision 32-true --seed $SEED --tokens "$TMP/corpus.bin" --tokens-out "$OUT/tokens.bin" \
  --init-out "$TMP/init.safetensors" --losses > "$OUT/losses.json"

# The reference's wpe has max(1024, SEQ) rows; rows SEQ and beyond never reach the loss (zero gradient, so no
# share in the clipped norm either), so the committed init keeps the first SEQ rows only.
"$PY" - "$TMP/init.safetensors" "$OUT/init.safetensors" $SEQ <<'PYEOF'
import json, struct, sys
src, dst, seq = sys.argv[1], sys.argv[2], int(sys.argv[3])
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
out_header, blobs, off = {}, [], 0
for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
    b, e = info["data_offsets"]
    blob, shape = data[b:e], list(info["shape"])
    if name == "transformer.wpe.weight":
        shape[0] = seq
        blob = blob[:seq * shape[1] * 4]
    out_header[name] = {"dtype": info["dtype"], "shape": shape, "data_offsets": [off, off + len(blob)]}
    blobs.append(blob)
    off += len(blob)
h = json.dumps(out_header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(dst, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PYEOF
ls -l "$OUT"
