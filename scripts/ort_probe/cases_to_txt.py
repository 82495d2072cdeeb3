"""Convert random_dags.py --dump JSON files into the plain-text table that
passes/src/schedule.rs replays in its tests (ort_profiled_cases.txt).

Line format: one graph per line, `# ...` lines are comments.
  <node 0> <node 1> ... | <ORT order>
where <node k> is the comma-separated producer index of each input slot of node k in
slot order ('_' = graph input / initializer, '.' = no inputs), and <ORT order> is the
comma-separated node indices in the order ORT 1.31.1 executed them (from its profile).
Usage: python cases_to_txt.py OUT.txt PER_FILE IN1.json [IN2.json ...]
"""
import json
import sys


def main():
    out, per_file, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    lines = ["# ORT 1.31.1 CPU EP profiled execution orders of random DAGs (scripts/ort_probe/random_dags.py)"]
    for path in files:
        cases = json.load(open(path))
        lines.append(f"# from {path.rsplit('/', 1)[-1]}: {min(per_file, len(cases))} graphs")
        for c in cases[:per_file]:
            nodes = []
            for ins in c["inputs"]:
                nodes.append(",".join("_" if p is None else str(p) for p in ins) if ins else ".")
            lines.append(" ".join(nodes) + " | " + ",".join(map(str, c["ort_order"])))
    open(out, "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
