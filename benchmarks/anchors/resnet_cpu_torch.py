"""The PyTorch twin of benchmarks/bench_conv_cpu.cpp: the same small CIFAR-style ResNet, batch, optimizer and
thread count, timed the same way (eager mode, NCHW f32, PyTorch's default CPU convolution).
Usage: resnet_cpu_torch.py [--model resnet8|resnet18] [--width W] [--batch-size N] [--steps S] [--warmup K]
                           [--repeats R] [--threads T] [--optimizer sgd|adam]
Prints one JSON line with the keys of bench_conv_cpu's ("impl": "pytorch-<version>")."""
import argparse, json, sys, time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # the driver script checks too; say it plainly when run by hand
    sys.exit(f"resnet_cpu_torch.py: PyTorch is not installed for {sys.executable} ({e}); "
             "install it into a venv, e.g. python3 -m venv /work/.venv-torch && /work/.venv-torch/bin/pip install torch numpy")


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False); self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False); self.b2 = nn.BatchNorm2d(cout)
        self.sc = None
        if stride != 1 or cin != cout:
            self.sc = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        return F.relu(y + (self.sc(x) if self.sc is not None else x))


class ResNet(nn.Module):
    def __init__(self, model, w):
        super().__init__()
        r18 = model == "resnet18"
        stages, per_stage = (4, 2) if r18 else (3, 1)
        self.stem = nn.Conv2d(3, w, 3, 1, 1, bias=False); self.stem_bn = nn.BatchNorm2d(w)
        blocks, cin = [], w
        for s in range(stages):
            cout = w << s
            for b in range(per_stage):
                blocks.append(BasicBlock(cin, cout, 2 if (s > 0 and b == 0) else 1)); cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, 10)

    def forward(self, x):
        h = self.blocks(F.relu(self.stem_bn(self.stem(x))))
        return self.fc(h.mean((2, 3)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet8", choices=["resnet8", "resnet18"])
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    net = ResNet(a.model, a.width)
    opt = (torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9) if a.optimizer == "sgd"
           else torch.optim.Adam(net.parameters(), lr=1e-3))
    x = torch.randn(a.batch_size, 3, 32, 32)
    y = torch.arange(a.batch_size) % 10
    acc = {"fwd": 0.0, "bwd": 0.0, "opt": 0.0}
    last = [0.0]

    def step():
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        acc["fwd"] += t1 - t0; acc["bwd"] += t2 - t1; acc["opt"] += t3 - t2
        last[0] = loss.item()

    for _ in range(a.warmup):
        step()
    runs = []
    for _ in range(a.repeats):
        for k in acc:
            acc[k] = 0.0
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        ms = 1e3 / a.steps
        runs.append(((time.perf_counter() - t0) * ms, acc["fwd"] * ms, acc["bwd"] * ms, acc["opt"] * ms))
    s = sorted(runs)
    med = s[(len(s) - 1) // 2]  # the lower middle of an even count, as bench_conv_cpu
    print(json.dumps({"bench": "conv_cpu", "impl": "pytorch-" + torch.__version__, "model": a.model, "width": a.width,
                      "batch_size": a.batch_size, "threads": torch.get_num_threads(), "optimizer": a.optimizer,
                      "steps": a.steps, "repeats": a.repeats, "ms_per_step": round(med[0], 3),
                      "ms_per_step_min": round(s[0][0], 3), "ms_per_step_median": round(med[0], 3),
                      "ms_per_step_max": round(s[-1][0], 3), "fwd_ms": round(med[1], 3), "bwd_ms": round(med[2], 3),
                      "opt_ms": round(med[3], 3), "samples_per_s": round(a.batch_size * 1e3 / med[0], 1),
                      "loss": round(last[0], 4), "mkldnn": torch.backends.mkldnn.is_available()}), flush=True)


if __name__ == "__main__":
    main()
