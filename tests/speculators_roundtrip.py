"""Run inside the `speculators` package's own virtual environment (tests/test_engines_own_code.py makes it): load an
exported head with speculators' own loader and write its draft logits for the given inputs.

    python speculators_roundtrip.py EXPORTED VERIFIER INPUTS.pt OUTPUTS.pt

INPUTS.pt holds `fused` (n, 3 hidden): the target's fused features, and `ids` (n,): the tokens, position i pairing
ids[i] with fused[i] (the feature of the position before the token). The single first step of speculators' own
Eagle3DraftModel.forward (core.py: fc, [embed; h], rotary, the first layer, lm_head(norm(.))) is run by hand with
its own modules, causal attention (sdpa), because its forward returns argmax tokens, not logits. OUTPUTS.pt gets
`logits` (n, draft_vocab), `d2t` and the installed speculators version."""

import sys
from importlib.metadata import version

import torch
from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig


def main(exported: str, verifier: str, inputs: str, outputs: str) -> None:
    config = Eagle3SpeculatorConfig.from_pretrained(exported)
    config.speculators_config.verifier.name_or_path = verifier   # a local folder: nothing is fetched
    config.transformer_layer_config._attn_implementation = "sdpa"
    model = Eagle3DraftModel.from_pretrained(exported, config=config, torch_dtype=torch.float32).eval()
    data = torch.load(inputs)
    ids, fused = data["ids"][None], data["fused"][None].float()
    n = ids.shape[1]
    positions = 1 + torch.arange(n)[None]
    with torch.no_grad():
        h = model.fc(fused)
        x = torch.cat([model.embed_tokens(ids), h], dim=-1)
        rotary = model.rotary_emb(x, positions)
        y = model.layers[0](x, attention_mask=None, position_ids=positions, position_embeddings=rotary)
        if isinstance(y, tuple):
            y = y[0]
        logits = model.lm_head(model.norm(y))[0]
    d2t = getattr(model, "d2t", None)
    torch.save({"logits": logits.float(), "d2t": None if d2t is None else d2t.long(),
                "version": version("speculators")}, outputs)


if __name__ == "__main__":
    main(*sys.argv[1:5])
