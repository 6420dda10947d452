"""Adapter for a model case: run a MoD language model on a golden case, write its candidate.

Usage: /usr/bin/python3 golden/torch/example_model.py CASE.json OUT.npz

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
    tokens = torch.tensor(case.inputs["tokens"])                  # B x S token ids
    targets = torch.tensor(case.inputs["targets"])                # B x S next tokens, -1 = ignored
    valid = [int(v) for v in case.inputs["valid"]]                # V_b valid tokens per row
    # "Embed", "Head", "FinalNorm" (+ "PosEmbed"), and per layer "L<l>.Wq", ..., "L<l>.Router"
    params = {n: torch.tensor(a, requires_grad=True) for n, a in case.params.items()}
    # per layer l that uses them: the random router's N(0,1) weights and the jitter eps, B x S
    noises = {int(n[7:]): torch.tensor(a) for n, a in case.inputs.items() if n.startswith("noise.L")}
    jitters = {int(n[8:]): torch.tensor(a) for n, a in case.inputs.items() if n.startswith("jitter.L")}

    fw = your_model.model_forward(tokens, valid, params, case.config, noises, jitters)   # your model
    ce = your_model.cross_entropy(fw["logits"], targets)                # mean over targets != -1
    loss = ce + fw["aux_total"]                   # case.loss: ce + sum over routed layers of L<l>.aux.total
    loss.backward()

    values = {"logits": fw["logits"], "ce": ce, "loss": loss}
    for l, layer in fw["layers"].items():                          # routed layers only
        values["L%d.router_logits" % l] = layer["router_logits"]
        values["L%d.selected" % l] = layer["selected"]              # ascending positions, -1 padded
        values["L%d.aux.total" % l] = layer["aux"]["total"]
        if "L%d.predictor_logits" % l in case.outputs:
            values["L%d.predictor_logits" % l] = layer["predictor_logits"]
        # Optional: the layer's weights g, multipliers, targets and output, when your
        # model keeps them, so that check reports the stage and layer a bug first
        # departs at ("layer 1, output weights"), not only the logits.
        for key in ("weights", "multipliers", "targets", "out"):
            if "L%d.%s" % (l, key) in case.outputs and key in layer:
                values["L%d.%s" % (l, key)] = layer[key]
    values.update({"grad.param." + n: p.grad for n, p in params.items()})
    mg.write_candidate(case, out_path, values)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[2])
    main(sys.argv[1], sys.argv[2])
