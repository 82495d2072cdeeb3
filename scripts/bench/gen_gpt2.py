"""Scale-benchmark models: the fixtures' hand-written GPT-2 training graph at full size.

Reuses scripts/fixtures (models.GPT2WithLoss and gen_std.export_fixture, route A:
aot_export_module(trace_joint=True) with the nll_loss_forward decomposition, then
torch.onnx.export(dynamo=True)) by import, so the bench graphs are built exactly like the
committed fixtures, only larger.  Parameters are graph inputs: the files hold no weights.

    python gen_gpt2.py --out target/bench/gpt2_12l.onnx --layers 12 [--ctx 1024] ...

Skips when --out exists (idempotent); writes through a temporary file and renames.
No ONNX Runtime check here: the fixture corpus checks the same code path at small sizes.
"""
import argparse
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "fixtures"))
import gen_std  # noqa: E402
import models  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--force", action="store_true", help="regenerate even if --out exists")
    a = ap.parse_args()
    if os.path.exists(a.out) and not a.force:
        print(f"[bench] {a.out} exists, skipping")
        return
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    sizes = dict(models.GPT2)
    sizes.update(n_layer=a.layers, n_head=a.heads, n_embd=a.embd, vocab=a.vocab, ctx=a.ctx,
                 batch=a.batch)
    # export_fixture names the file in its metadata after the path's basename: write under
    # the same basename in a scratch folder beside the target and rename, so an interrupted
    # run never leaves a partial file at --out.
    scratch = os.path.join(os.path.dirname(os.path.abspath(a.out)), ".partial")
    os.makedirs(scratch, exist_ok=True)
    tmp = os.path.join(scratch, os.path.basename(a.out))
    t0 = time.time()
    gen_std.export_fixture("gpt2", 0.0, "aot", tmp, sizes=sizes)
    os.replace(tmp, a.out)
    print(f"[bench] wrote {a.out} (layers {a.layers}, heads {a.heads}, embd {a.embd}, "
          f"vocab {a.vocab}, ctx {a.ctx}, batch {a.batch}) in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
