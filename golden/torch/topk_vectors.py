"""Write golden/testdata/torch-topk-cpu.json: rows of router weights with the order in
which this machine's torch.topk(r, k, sorted=False) returns their k largest on CPU.

Usage: /usr/bin/python3 golden/torch/topk_vectors.py OUT.json

golden.torchCPUTopK emulates that order (for gather_first_k as ports write it) and
TestTorchCPUTopK checks it against these rows, made by torch itself. Rows of 2 to 40
weights, a third of them with ties (values rounded to one decimal), k with k*64 > n
(the std::nth_element path of torch's CPU kernel). Deterministic (seed 7).
"""

import json
import random
import sys

import torch


def main(argv):
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[3], file=sys.stderr)
        return 2
    rng = random.Random(7)
    rows = []
    while len(rows) < 120:
        n = rng.randint(2, 40)
        k = rng.randint(1, n)
        r = [round(rng.gauss(0, 1), 1 if len(rows) % 3 == 0 else 6) for _ in range(n)]
        order = torch.topk(torch.tensor(r, dtype=torch.float64), k, sorted=False).indices.tolist()
        rows.append({"r": r, "k": k, "order": order})
    with open(argv[0], "w") as fh:
        json.dump({"torch": torch.__version__, "rows": rows}, fh, separators=(",", ":"))
        fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
