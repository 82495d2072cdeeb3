"""Scale-benchmark model: the fixtures' HF Llama training graph at the size of issue 10's Llama.

Reuses scripts/fixtures (models_more.LlamaWithLoss, and gen_more's registration of it in
gen_std: make_fx(grad_and_value(functional_call)) with the nll_loss_forward decomposition,
then torch.onnx.export(dynamo=True)) by import, so the bench graph is built exactly like the
committed llama fixture, only larger.  Parameters are graph inputs: the file holds no weights.

    python gen_llama.py --out target/bench/llama_8l.onnx [--layers 8 --hidden 512 ...] [--check]

Skips when --out exists (idempotent); writes through a temporary file and renames.
--check runs the fixtures' check once (loss and every gradient on onnxruntime against
PyTorch eager autograd, on data other than the tracing data) and prints the largest
relative error; it fails above the fixtures' 1e-5.
"""
import argparse
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "fixtures"))
import gen_more  # noqa: E402  (registers llama and its data spec in gen_std)
import gen_std  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--intermediate", type=int, default=1376)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=10000)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--force", action="store_true", help="regenerate even if --out exists")
    ap.add_argument("--check", action="store_true",
                    help="check loss and gradients on onnxruntime against PyTorch once")
    a = ap.parse_args()
    if os.path.exists(a.out) and not a.force and not a.check:
        print(f"[bench] {a.out} exists, skipping")
        return
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    sizes = dict(n_layer=a.layers, n_head=a.heads, n_kv_head=a.kv_heads, hidden=a.hidden,
                 intermediate=a.intermediate, vocab=a.vocab, ctx=a.ctx, batch=a.batch)
    if os.path.exists(a.out) and not a.force:
        # --check of an existing file: the same seeded weights, rebuilt without exporting
        mod = gen_std.build("llama", 0.0, sizes)
        s = dict(gen_std.MODELS["llama"]["sizes"])
        s.update(sizes)
        spec = gen_std.data_spec("llama", s)
        pubs = [pub for pub, _, _ in gen_std.param_list(mod, gen_std.MODELS["llama"]["prefix"])]
    else:
        # export_fixture names the file in its metadata after the path's basename: write under
        # the same basename in a scratch folder beside the target and rename, so an
        # interrupted run never leaves a partial file at --out.
        scratch = os.path.join(os.path.dirname(os.path.abspath(a.out)), ".partial")
        os.makedirs(scratch, exist_ok=True)
        tmp = os.path.join(scratch, os.path.basename(a.out))
        t0 = time.time()
        mod, spec, pubs = gen_std.export_fixture("llama", 0.0, "make_fx", tmp, sizes=sizes)
        os.replace(tmp, a.out)
        print(f"[bench] wrote {a.out} ({sizes}) in {time.time() - t0:.1f}s")
    n_params = sum(p.numel() for p in mod.parameters())
    print(f"[bench] {n_params:,} parameters ({n_params / 1e6:.2f}M)")
    if a.check:
        t0 = time.time()
        res = gen_more.check_fixture(a.out, "llama", 0.0, mod, spec, pubs)
        print(f"[bench] check ({time.time() - t0:.1f}s): max rel err {res['max_rel_err']:.3g} on "
              f"{res['worst']}, loss rel err {res['loss_rel_err']:.3g}")


if __name__ == "__main__":
    main()
