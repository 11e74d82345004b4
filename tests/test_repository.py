"""The model repository helpers: builders, links between models, configs, the tree view."""

import os
import subprocess
import sys
import warnings

import pytest
import torch
from tritonclient.utils import InferenceServerException

from tritonbook import repository
from tritonbook.client import server_answer
from tritonbook.server import TritonServerError


def test_a_linked_model_builds_its_target_first(tmp_path):
    (tmp_path / "affine_torchscript").mkdir()
    link = tmp_path / "copy" / "1" / "model.pt"
    link.parent.mkdir(parents=True)
    repository.link_to("affine_torchscript", "1/model.pt")(link)
    target = tmp_path / "affine_torchscript" / "1" / "model.pt"
    assert target.is_file() and link.is_symlink()
    # Relative, so it resolves wherever the repository is mounted.
    assert os.readlink(link) == "../../affine_torchscript/1/model.pt"
    assert link.resolve() == target.resolve()


def test_every_linked_model_points_at_a_built_file():
    links = {model: builder.target for model, files in repository.BUILDERS.items()
             for _, builder in files if hasattr(builder, "target")}
    assert set(links) == {"gfpgan_static", "gfpgan_batched"}
    for target_model, relative in links.values():
        assert relative in dict(repository.BUILDERS[target_model])


def test_ensure_model_files_builds_every_version(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setitem(repository.BUILDERS, "two_versions", [
        ("1/model.bin", lambda path: (calls.append(1), path.write_bytes(b"one"))),
        ("2/model.bin", lambda path: (calls.append(2), path.write_bytes(b"two"))),
    ])
    built = repository.ensure_model_files(["two_versions"], tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in built] == ["two_versions/1/model.bin", "two_versions/2/model.bin"]
    assert (tmp_path / "two_versions" / "2" / "model.bin").read_bytes() == b"two"
    assert repository.ensure_model_files(["two_versions"], tmp_path) == []  # present: not rebuilt
    assert not list(tmp_path.rglob("*.partial"))
    assert calls == [1, 2]


def test_a_file_built_from_other_inputs_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setitem(repository.BUILDERS, "one", [
        ("1/model.bin", lambda path: path.write_bytes(b"one"))])
    [path] = repository.ensure_model_files(["one"], tmp_path)
    assert repository.ensure_model_files(["one"], tmp_path) == []
    # The package's code (or an asset, or a library version) changed since.
    monkeypatch.setattr(repository, "inputs_key", lambda: "other code")
    assert repository.ensure_model_files(["one"], tmp_path) == [path]
    assert repository.ensure_model_files(["one"], tmp_path) == []
    # A file replaced by hand, or one without its record, is rebuilt too.
    path.write_bytes(b"replaced")
    assert repository.ensure_model_files(["one"], tmp_path) == [path]
    path.with_name(".model.bin.built.json").unlink()
    assert repository.ensure_model_files(["one"], tmp_path) == [path]
    assert path.read_bytes() == b"one"
    # The record is not part of what Triton reads, nor of the listed tree.
    assert ".built.json" not in repository.tree(tmp_path, ["one"])


def test_the_inputs_key_follows_the_package_and_the_checkpoint(monkeypatch, tmp_path):
    key = repository.inputs_key()
    assert repository.inputs_key() == key
    monkeypatch.setenv("GFPGAN_WEIGHTS", str(tmp_path / "GFPGANv1.pth"))
    assert repository.inputs_key() != key


def test_a_shown_build_is_timed_in_the_full_profile_and_reused_in_the_quick_one(
        tmp_path, monkeypatch):
    monkeypatch.setattr(repository, "REPOSITORY", tmp_path)
    monkeypatch.setitem(repository.BUILDERS, "one", [
        ("1/model.bin", lambda path: path.write_bytes(b"one"))])
    monkeypatch.setenv("TRITONBOOK_PROFILE", "full")
    [first] = repository.build_shown(["one"])
    [again] = repository.build_shown(["one"])
    assert first.seconds is not None and again.seconds is not None
    assert str(again).startswith("built in ")
    monkeypatch.setenv("TRITONBOOK_PROFILE", "quick")
    [reused] = repository.build_shown(["one"])
    assert reused.seconds is None and str(reused).startswith("up to date")
    assert reused.path == tmp_path / "one" / "1" / "model.bin"


def test_srcnn_versions_use_different_weights():
    builders = dict(repository.BUILDERS["srcnn_versions"])
    assert builders["1/model.onnx"] is repository.build_srcnn_x3_onnx
    assert builders["2/model.onnx"] is repository.build_srcnn_onnx


def test_read_config_keeps_strings_and_makes_numbers(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "x", data_type: TYPE_FP32, dims: [ -1, 8 ] } ]\n'
        'output [ { name: "y", data_type: TYPE_FP32, dims: [ 8 ] } ]\n'
        'parameters { key: "THREADS" value: { string_value: "1" } }\n'
        'version_policy: { specific: { versions: [ 1, 3 ] } }\n')
    config = repository.read_config("m", tmp_path)
    assert config["input"][0]["dims"] == [-1, 8]
    assert config["version_policy"]["specific"]["versions"] == [1, 3]
    assert config["parameters"]["THREADS"] == {"string_value": "1"}  # a string stays a string


def test_config_diff_shows_only_the_lines_that_differ(tmp_path):
    for name, batch in (("a", 0), ("b", 8)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text(
            f'# model {name}\nbackend: "python"\n\nmax_batch_size: {batch}\n')
    diff = repository.config_diff("a", "b", tmp_path).splitlines()
    assert diff[:2] == ["--- a", "+++ b"]
    assert [line for line in diff if line[0] in "+-" and line[1] not in "+-"] == [
        "-max_batch_size: 0", "+max_batch_size: 8"]  # the comments differ too: not shown
    assert repository.config_diff("a", "a", tmp_path) == ""


def test_tree_shows_links_and_versions():
    text = repository.tree(models=["gfpgan_static", "srcnn_versions"])
    assert text.splitlines()[0] == "model_repository/"
    assert "model.pt -> ../../gfpgan/1/model.pt" in text
    assert "│   ├── 1/" in text or "    ├── 1/" in text
    assert "2/" in text and "config.pbtxt" in text


def test_gfpgan_out_size_reads_the_description(tmp_path):
    class Tiny(torch.nn.Module):
        def forward(self, x):
            return x

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.script(Tiny())
        torch.jit.save(scripted, str(tmp_path / "described.pt"),
                       _extra_files={"tritonbook.txt": "random GFPGANv1 (seed 0, out_size=128)"})
        torch.jit.save(scripted, str(tmp_path / "bare.pt"))
    assert repository.gfpgan_out_size(tmp_path / "described.pt") == 128
    with pytest.raises(ValueError, match="no tritonbook description"):
        repository.gfpgan_out_size(tmp_path / "bare.pt")


def test_server_answer_drops_the_python_stack():
    load_error = TritonServerError(
        "loading failed: boom\n--- server log (last lines) ---\n...",
        "loading failed: Internal: TritonModelException: boom\n\nAt:\n  /tmp/x/model.py(1): initialize\n")
    assert server_answer(load_error) == "loading failed: Internal: TritonModelException: boom"
    assert server_answer(InferenceServerException("unexpected shape")) == "unexpected shape"
    assert server_answer(ValueError("bad")) == "ValueError: bad"


def test_export_from_the_command_line_says_what_is_wrong(tmp_path):
    command = [sys.executable, "-m", "tritonbook.repository", "export", str(tmp_path / "v")]
    done = subprocess.run([*command, "face_restore_ensemble"], capture_output=True, text=True)
    assert done.returncode == 2 and "calls ['face_detect', 'gfpgan', 'face_paste']" in done.stderr
    done = subprocess.run([*command, "affine_python"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "v" / "affine_python" / "1" / "model.py").exists()
    done = subprocess.run([*command, "affine_python"], capture_output=True, text=True)
    assert done.returncode == 2 and "is not empty" in done.stderr


def test_build_from_the_command_line_builds_what_is_missing_and_refuses_the_unknown():
    command = [sys.executable, "-m", "tritonbook.repository", "build"]
    repository.ensure_model_files(["affine_torchscript"])
    done = subprocess.run([*command, "affine_torchscript"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("0 file(s) built")
    done = subprocess.run([*command, "affine_python", "nonesuch"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "no generated files for affine_python, nonesuch" in done.stderr


def test_build_writes_a_missing_file(tmp_path, monkeypatch):
    # The command's function, on a scratch copy of one model folder.
    monkeypatch.setattr(repository, "REPOSITORY", tmp_path)
    (tmp_path / "affine_torchscript").mkdir()
    repository._main(["build", "affine_torchscript"])
    assert (tmp_path / "affine_torchscript" / "1" / "model.pt").exists()


def test_a_model_given_as_the_load_api_takes_it_is_written_as_a_folder(tmp_path):
    config = {"name": "tiny", "backend": "python", "max_batch_size": 4,
              "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [3, -1]}],
              "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [3, -1]}],
              "instance_group": [{"count": 2, "kind": "KIND_CPU"}]}
    folder = repository.write_folder(tmp_path, config, {"file:1/model.py": b"# model\n"})
    assert folder == tmp_path / "tiny"
    assert (folder / "1" / "model.py").read_bytes() == b"# model\n"
    assert repository.read_config("tiny", tmp_path) == config
    with pytest.raises(ValueError, match="file:"):
        repository.write_folder(tmp_path / "other", config, {"1/model.py": b""})
