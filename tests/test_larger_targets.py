"""Issue 43: the GPU allow-list's larger targets, SmolLM2-360M-Instruct and SmolLM2-1.7B-Instruct, as random twins
of their published configs with the default model's tokenizer (tools.random_model: no download). Every
training-free method (ar, pld, racer, respec with the copy-logit fallback, unified without a model stage: no head
exists for them) emits ar's tokens, greedy, fp32, on the CPU. Behind --long: the 1.7B twin writes 6.8 GB."""

import pytest

from specviz.engine.session import Session
from specviz.runtime.loading import load_model
from specviz.benches.random_model import PUBLISHED, describe, materialise

PROMPT = [{"role": "user", "content": "Rename count to total:\ndef f(xs):\n    count = 0\n    for x in xs:\n"
                                      "        count += x\n    return count"}]
# a cold copy-logit table (the papers' setting): the warm one reads 8,192 corpus tokens through the model first, which
# for the 1.7B is minutes of a CPU and a second of a GPU
COLD = {"warm_table": 0}
TRAINING_FREE = (("pld", {}), ("racer", COLD), ("respec", {"fallback": "logits", **COLD}),
                 ("unified", {"model_stage": "off", **COLD}))


@pytest.mark.long
@pytest.mark.parametrize("name", list(PUBLISHED))
def test_training_free_methods_are_lossless_on_a_larger_twin(name, tmp_path):
    twin = load_model(str(materialise(str(describe(name, tmp_path / "twin")))))
    config = twin.model.config
    assert (config.hidden_size, config.num_hidden_layers) == (PUBLISHED[name]["hidden_size"],
                                                              PUBLISHED[name]["num_hidden_layers"])
    reference = Session(twin, "ar").start(PROMPT)
    reference.run(12)
    for method, params in TRAINING_FREE:
        session = Session(twin, method, params, budget=8).start(PROMPT)
        session.run(12)
        assert session.output_ids == reference.output_ids, (name, method)
    print(f"{name} twin: {sum(p.numel() for p in twin.model.parameters()) / 1e6:.0f} M parameters, "
          f"{len(TRAINING_FREE)} methods lossless over {len(reference.output_ids)} tokens")
    from specviz.runtime.cache_dir import cache_root

    for stale in (cache_root() / "copy_logits").glob(f"*{tmp_path.name}_twin*"):  # a warm table, if one was built
        stale.unlink()
