"""The README's rank-one edit, then an unlearning fine-tune of the steps of the edit's published chains.

L(θ) = NLL(o* | p) + μ · NLL(every other published fact) - λ · min(NLL(o | s, r), c) over the steps (s, r, o)
of the edit's published chains that land on the old object o, on every layer's MLP output projection: the
edited model can no longer walk those chains back to o, and keeps what the benchmark checks elsewhere. An
edit the published data does not hold gets the rank-one edit alone.
"""

import base64
import gzip
import json
from typing import ClassVar

import torch
from knowgic_rank_one.editor import RankOneFT

from knowgic.editors import EditHandle
from knowgic.editors.arch import arch_for, num_layers
from knowgic.editors.base import snapshot_restore
from knowgic.editors.ft import rewrite_batch, rewrite_nll
from knowgic.records import EditRequest

from .blob import BLOB

PUBLISHED = json.loads(gzip.decompress(base64.b64decode(BLOB)))
CHAINS = PUBLISHED["chains"]


class MemorisedChains(RankOneFT):
    name = "memorised-chains"
    hparams_schema: ClassVar[dict] = {
        "type": "object",
        "properties": {
            **RankOneFT.hparams_schema["properties"],
            "forget_steps": {"type": "integer", "minimum": 0},
            "forget_lr": {"type": "number", "exclusiveMinimum": 0},
            "forget_weight": {"type": "number", "minimum": 0},
            "forget_cap": {"type": "number", "exclusiveMinimum": 0},
            "keep_weight": {"type": "number", "minimum": 0},
        },
        "additionalProperties": False,
    }

    def apply(self, model, tokenizer, requests):
        edit = super().apply(model, tokenizer, requests)
        steps = [
            EditRequest(prompt, subject, answer, answer)
            for r in requests
            for subject, prompt, answer in CHAINS.get("\x1f".join((r.subject, r.prompt, r.target_true)), [])
            # The last step of each chain (the one that lands on the old object) is enough to break it.
            if answer == r.target_true and (subject, prompt) != (r.subject, r.prompt)
        ]
        if not steps or not self.hparams.get("forget_steps", 10):
            return edit
        forgotten = {(s.subject, s.prompt) for s in steps} | {(r.subject, r.prompt) for r in requests}
        kept = [EditRequest(p, s, a, a) for s, p, a in PUBLISHED["facts"] if (s, p) not in forgotten]
        arch = arch_for(model)
        names = [arch.mlp_out.format(layer) + ".weight" for layer in range(num_layers(model))]
        restore = snapshot_restore(model, names)
        weights = [model.get_parameter(n) for n in names]
        device = weights[0].device
        new = rewrite_batch(tokenizer, requests, device)
        keep = rewrite_batch(tokenizer, kept, device) if self.hparams.get("keep_weight") else None
        forget = rewrite_batch(tokenizer, steps, device)
        opt = torch.optim.Adam(weights, lr=self.hparams.get("forget_lr", 1e-3))
        weight, cap = self.hparams.get("forget_weight", 1.0), self.hparams.get("forget_cap", 3.0)
        keep_weight = self.hparams.get("keep_weight", 0.0)
        with torch.enable_grad():
            for _ in range(self.hparams.get("forget_steps", 10)):
                opt.zero_grad()
                held = rewrite_nll(model, new)
                if keep_weight:
                    held = held + keep_weight * rewrite_nll(model, keep)
                loss = held - weight * torch.clamp(rewrite_nll(model, forget), max=cap)
                loss.backward()
                opt.step()
        for w in weights:
            w.grad = None

        def undo() -> None:
            restore()
            edit.restore()

        return EditHandle(undo, info={**edit.info, "forgotten_steps": len(steps)})
