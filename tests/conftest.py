import pytest

from specviz.lab import shared_model


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long real-model runs (deselect with -m 'not slow')")
    config.addinivalue_line("markers", "browser: drives headless Chromium")


@pytest.fixture(scope="session")
def lm():
    """The real default model (packaged GGUF, dequantised once into the cache), fp32 on CPU."""
    return shared_model(None)


@pytest.fixture(scope="session")
def prefix_ids(lm):
    return lm.tokenizer("The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is",
                        return_tensors="pt").input_ids[0].tolist()
