"""Rank-one fine-tuning: W' = W + u k^T / ||k||^2 on one MLP output projection, k its input at the
subject's last token (mean over requests), u learned by Adam on -log P(target_new | rewrite prompt)."""

from typing import ClassVar

import torch

from knowgic.editors import EditHandle, Editor, snapshot_restore
from knowgic.editors.arch import arch_for
from knowgic.editors.ft import rewrite_batch, rewrite_nll


class RankOneFT(Editor):
    name = "rank-one-ft"
    # Checked before the run: a typo in the YAML (`layre: 1`) is an error, not a silently ignored key.
    hparams_schema: ClassVar[dict] = {
        "type": "object",
        "properties": {
            "layer": {"type": "integer", "minimum": 0},
            "steps": {"type": "integer", "minimum": 1},
            "lr": {"type": "number", "exclusiveMinimum": 0},
        },
        "additionalProperties": False,
    }

    def apply(self, model, tokenizer, requests):
        arch, layer = arch_for(model), self.hparams.get("layer", 0)
        name = arch.mlp_out.format(layer)
        module, weight = model.get_submodule(name), model.get_parameter(name + ".weight")
        restore = snapshot_restore(model, [name + ".weight"])  # exact undo; the harness calls it
        batch = rewrite_batch(tokenizer, requests, weight.device)
        last = [len(tokenizer(r.prompt.split("{}")[0] + r.subject)["input_ids"]) - 1 for r in requests]
        keys = []  # the projection's input at each request's last subject token
        h = module.register_forward_pre_hook(lambda m, a: keys.append(a[0][range(len(last)), last]))
        with torch.no_grad():
            model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        h.remove()
        k = keys[0].float().mean(0)
        k = k / k.norm() ** 2  # so that the update maps k to exactly u
        u = torch.zeros(weight.shape[arch.weight_transposed], device=weight.device, requires_grad=True)
        h = module.register_forward_hook(lambda m, a, y: y + ((a[0].float() @ k)[..., None] * u).to(y.dtype))
        opt = torch.optim.Adam([u], lr=self.hparams.get("lr", 0.5))
        with torch.enable_grad():  # train u alone: the hook adds u (k . x), the same as W + u k^T
            for _ in range(self.hparams.get("steps", 40)):
                loss = rewrite_nll(model, batch)
                (u.grad,) = torch.autograd.grad(loss, [u])  # no gradient reaches the model's weights
                opt.step()
        h.remove()
        with torch.no_grad():  # write the learned update into W (GPT-2's Conv1D stores W transposed)
            weight += (torch.outer(k, u) if arch.weight_transposed else torch.outer(u, k)).to(weight.dtype)
        return EditHandle(restore, info={"loss": float(loss.detach()), "u_norm": float(u.detach().norm())})
