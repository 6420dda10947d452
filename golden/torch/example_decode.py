"""Adapter for a decode case: the full causal forward and token-by-token decoding.

Usage: /usr/bin/python3 golden/torch/example_decode.py CASE.json OUT.npz

golden/torch/mod_torch.py stands in for your model here: replace the calls marked
"your model" with yours. Then: go run ./cmd/modref check --candidate OUT.npz CASE
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, os.pardir, "python")]
import mod_torch as your_model  # noqa: E402
import modref_golden as mg  # noqa: E402


def main(case_path, out_path):
    case = mg.load_case(case_path)
    tokens = torch.tensor(case.inputs["tokens"])
    valid = [int(v) for v in case.inputs["valid"]]
    params = {n: torch.tensor(a) for n, a in case.params.items()}

    with torch.no_grad():                          # inference only: a decode case holds no gradients
        fw = your_model.model_forward(tokens, valid, params, case.config)     # your model, whole sequence
        steps, routed = your_model.decode(tokens, valid, params, case.config)  # your model, one token at a time

    values = {"logits": fw["logits"], "decode_logits": steps}
    for l, layer in fw["layers"].items():                          # routed layers only
        values["L%d.router_logits" % l] = layer["router_logits"]
        values["L%d.selected" % l] = layer["selected"]              # the tokens with r > 0 (or q > 0)
        values["L%d.routed" % l] = routed[l]                        # 1 where decoding routed the token
        if "L%d.predictor_logits" % l in case.outputs:
            values["L%d.predictor_logits" % l] = layer["predictor_logits"]
    mg.write_candidate(case, out_path, values)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[2])
    main(sys.argv[1], sys.argv[2])
