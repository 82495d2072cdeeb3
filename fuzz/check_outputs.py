"""Judge the fuzzer's sampled outputs with ONNX's checker and ONNX Runtime.

Usage: python check_outputs.py DIR

For every `out-<exec>.onnx` in DIR (and its input `in-<exec>.onnx`), print one line:
`<exec>\t<output checker>\t<output ORT>\t<input checker>\t<input ORT>\t<first error>`,
each verdict `1` (accepted) or `0` (refused): `onnx.checker.check_model(full_check=True)`,
then an `onnxruntime.InferenceSession` on the CPU provider.
"""

import glob
import os
import re
import sys

import onnx
import onnxruntime as ort


def first_line(e):
    return str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__


def judge(path):
    errors = []
    try:
        onnx.checker.check_model(path, full_check=True)
        checker = 1
    except Exception as e:  # noqa: BLE001 - any refusal counts
        checker = 0
        errors.append("checker: " + first_line(e))
    try:
        so = ort.SessionOptions()
        so.log_severity_level = 4
        ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        runtime = 1
    except Exception as e:  # noqa: BLE001
        runtime = 0
        errors.append("ORT: " + first_line(e))
    return checker, runtime, errors


def main():
    folder = sys.argv[1]
    outs = glob.glob(os.path.join(folder, "out-*.onnx"))
    execs = sorted(int(re.search(r"out-(\d+)\.onnx$", p).group(1)) for p in outs)
    for ex in execs:
        oc, orun, oerr = judge(os.path.join(folder, f"out-{ex}.onnx"))
        ic, irun, ierr = judge(os.path.join(folder, f"in-{ex}.onnx"))
        why = (oerr or ["input " + e for e in ierr] or [""])[0].replace("\t", " ")
        print(f"{ex}\t{oc}\t{orun}\t{ic}\t{irun}\t{why}", flush=True)


if __name__ == "__main__":
    main()
