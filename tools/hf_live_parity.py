#!/usr/bin/env python3
"""Model parity on the GPU machine, live: Hugging Face transformers (run there, now) against
`flashgen logits --backend cuda` on every fixture model under tests/fixtures/models/.

For each fixture and each of its reference prompts: transformers computes float32 logits of every
prompt position on the GPU; flashgen writes its logits (bf16 activations, f32 accumulation) to a
.npy; the per-position error is max_vocab|ours - hf| / max|hf|. Its largest value must stay below
the larger of --tol and twice the largest error of transformers itself run in bf16 on the fixture's
prompts (measured live), and its mean over the prompt's positions below twice transformers' own
mean on that prompt: bf16 is judged against what bf16 costs the reference too. Also
checks that the greedy next token of the last position agrees wherever HF's top-2 margin is larger
than the bf16 error (a smaller margin is a legitimate rounding tie).

  python3 tools/hf_live_parity.py --flashgen .device/bin/flashgen [--tol 3e-2] [--json OUT.json]
Prints one row per (fixture, prompt) and exits non-zero if any row fails.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flashgen", required=True)
    ap.add_argument("--tol", type=float, default=3e-2)
    ap.add_argument("--json")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--diagnose", action="append", default=[], metavar="FIXTURE",
                    help="for this fixture also record per-position errors (ours, transformers bf16 on the "
                         "GPU and on the CPU) in the JSON rows: where along the prompt the bf16 error grows")
    args = ap.parse_args()

    fixtures = sorted(p for p in (ROOT / "tests" / "fixtures" / "models").iterdir() if (p / "reference.json").exists())
    rows, failed = [], 0
    for fx in fixtures:
        ref = json.loads((fx / "reference.json").read_text())
        # Eager attention, as the fixtures were made: transformers' SDPA path skips Gemma 2's
        # attention soft-capping, so it is not the model's reference.
        model = AutoModelForCausalLM.from_pretrained(fx, dtype=torch.float32, attn_implementation="eager").cuda().eval()
        model_bf16 = AutoModelForCausalLM.from_pretrained(fx, dtype=torch.bfloat16,
                                                          attn_implementation="eager").cuda().eval()
        hf_rows, bf16_pos = [], []
        for prompt in ref["prompts"]:
            with torch.no_grad():
                hf = model(torch.tensor([prompt], device="cuda")).logits[0].float().cpu().numpy()
                hf_bf16 = model_bf16(torch.tensor([prompt], device="cuda")).logits[0].float().cpu().numpy()
            hf_rows.append((hf, hf_bf16))
            bf16_pos.append(np.abs(hf_bf16 - hf).max(axis=1) / np.abs(hf).max())
        # The largest error is bounded by the fixture's bf16 noise level (its largest over the
        # prompts: one run's largest error on one prompt is a poor yardstick, see
        # tools/bf16_noise_spread.py), the mean over positions by this prompt's.
        bound = max(args.tol, 2 * max(float(e.max()) for e in bf16_pos))
        for i, prompt in enumerate(ref["prompts"]):
            hf, hf_bf16 = hf_rows[i]
            hf_bf16_err = float(bf16_pos[i].max())
            hf_bf16_mean = float(bf16_pos[i].mean())
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "logits.npy")
                cmd = [args.flashgen, "logits", "--model", str(fx), "--backend", args.backend,
                       "--prompt-ids", ",".join(map(str, prompt)), "--output", out]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0:
                    rows.append(dict(fixture=fx.name, prompt=i, error=proc.stderr.strip()))
                    failed += 1
                    continue
                ours = np.load(out)
            ours_pos = np.abs(ours - hf).max(axis=1) / np.abs(hf).max()
            err, mean_err = float(ours_pos.max()), float(ours_pos.mean())
            top2 = np.sort(hf[-1])[-2:]
            margin = float(top2[1] - top2[0])
            same_argmax = int(ours[-1].argmax()) == int(hf[-1].argmax())
            tie = margin < 2 * err * float(np.abs(hf).max())
            ok = err < bound and mean_err < 2 * hf_bf16_mean and (same_argmax or tie)
            failed += not ok
            row = dict(fixture=fx.name, prompt=i, tokens=len(prompt), rel_err=err, hf_bf16_err=hf_bf16_err,
                       mean_err=mean_err, hf_bf16_mean_err=hf_bf16_mean, bound=bound, same_argmax=same_argmax,
                       margin=margin, ok=ok)
            if fx.name in args.diagnose:
                # A second bf16 sample of the reference (transformers' CPU kernels round and accumulate
                # differently) says how wide bf16 noise is on this prompt.
                with torch.no_grad():
                    cpu_bf16 = model_bf16.cpu()(torch.tensor([prompt])).logits[0].float().numpy()
                    model_bf16.cuda()
                scale = float(np.abs(hf).max())
                row["per_position"] = dict(
                    ours=(np.abs(ours - hf).max(axis=1) / scale).tolist(),
                    hf_bf16_gpu=(np.abs(hf_bf16 - hf).max(axis=1) / scale).tolist(),
                    hf_bf16_cpu=(np.abs(cpu_bf16 - hf).max(axis=1) / scale).tolist())
                row["hf_bf16_cpu_err"] = float(np.abs(cpu_bf16 - hf).max() / scale)
                print(f"{fx.name} prompt {i}: per-position max rel err (ours / hf bf16 gpu / hf bf16 cpu):")
                for pos, (a, b, c) in enumerate(zip(*row["per_position"].values())):
                    print(f"  {pos:>4} {a:10.3e} {b:10.3e} {c:10.3e}")
            rows.append(row)
    print(f"{'fixture':<16} {'prompt':>6} {'tokens':>6} {'max rel err':>12} {'hf bf16 err':>12} {'bound':>9} "
          f"{'mean err':>9} {'hf mean':>9} {'argmax':>7}  result")
    for r in rows:
        if "error" in r:
            print(f"{r['fixture']:<16} {r['prompt']:>6} {'':>6} {'':>12} {'':>7}  ERROR {r['error']}")
        else:
            print(f"{r['fixture']:<16} {r['prompt']:>6} {r['tokens']:>6} {r['rel_err']:>12.2e} {r['hf_bf16_err']:>12.2e} "
                  f"{r['bound']:>9.2e} {r['mean_err']:>9.2e} {r['hf_bf16_mean_err']:>9.2e} "
                  f"{'same' if r['same_argmax'] else 'differs':>7}  {'ok' if r['ok'] else 'FAIL'}")
    print(f"hf_live_parity: {len(rows) - failed} passed, {failed} failed (bounds: largest error < max({args.tol}, "
          "2 x transformers' own largest bf16 error over the fixture's prompts), mean over positions < 2 x "
          "transformers' own on the prompt; bf16 activations)")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
