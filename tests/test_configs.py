"""Every config.pbtxt in the book's repository parses with Triton's schema and loads."""

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tritonbook import repository

CONFIGS = sorted(Path(repository.REPOSITORY).glob("*/config.pbtxt"))


def test_repository_has_models():
    assert CONFIGS, f"no config.pbtxt under {repository.REPOSITORY}"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.parent.name)
def test_config_parses_with_tritons_schema(path):
    config = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
    # Triton takes the model name from the folder; a name in the file must agree.
    assert config.name in ("", path.parent.name)
    assert config.backend or config.platform, "a config must name its backend or platform"
    assert list(config.input) and list(config.output)


def test_a_broken_config_does_not_parse():
    with pytest.raises(text_format.ParseError):
        text_format.Parse('max_batch_size: "eight"', model_config_pb2.ModelConfig())


@pytest.mark.parametrize("model", repository.model_names(), ids=str)
def test_model_loads_into_the_embedded_server(book_server, model):
    book_server.load(model)
    try:
        assert book_server.model_ready(model)
        served = book_server.http().get_model_config(model)
        assert served["name"] == model
    finally:
        book_server.unload(model)
