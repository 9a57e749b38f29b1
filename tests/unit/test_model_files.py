import pytest

from superfluid.adapters.model_files import runtime_for as record_for
from superfluid.domain.errors import ModelFileError
from superfluid.entrypoints.container import RUNTIMES


def runtime_for(path):
    return record_for(path, RUNTIMES).name


def test_the_file_picks_the_runtime(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF\x03\x00\x00\x00")
    base = tmp_path / "m.base"
    base.write_bytes(b"BASE\x01\x00\x00\x00")
    mlx = tmp_path / "mlx-model"
    mlx.mkdir()
    (mlx / "config.json").write_text("{}")
    (mlx / "model.safetensors").write_bytes(b"")
    assert runtime_for(gguf) == "llamacpp"
    assert runtime_for(base) == "basert"
    assert runtime_for(mlx) == "mlx"


def test_a_gguf_is_recognised_by_its_bytes_not_its_name(tmp_path):
    renamed = tmp_path / "model.bin"
    renamed.write_bytes(b"GGUF\x03\x00\x00\x00")
    assert runtime_for(renamed) == "llamacpp"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: None, "no such model file"),
        (lambda p: p.write_text("hello"), "not a model superfluid can serve"),
        (lambda p: p.mkdir(), "a directory that is not a model superfluid can serve"),
    ],
)
def test_anything_else_is_one_clear_line(tmp_path, setup, message):
    path = tmp_path / "x"
    setup(path)
    with pytest.raises(ModelFileError) as err:
        runtime_for(path)
    assert message in err.value.message
    assert "\n" not in err.value.message
