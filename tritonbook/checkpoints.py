"""What separates a checkpoint from the model it should load into (shared by the networks' loaders)."""

from __future__ import annotations

from collections.abc import Mapping


def state_dict_mismatch(expected: Mapping, found: Mapping) -> tuple[list[str], list[str], list[str]]:
    """``(missing, unexpected, wrong_shape)`` of ``found`` against ``expected`` (both state_dicts).

    ``wrong_shape`` entries read ``"key: checkpoint (…), model (…)"``. All three empty: it fits.
    """
    missing = [k for k in expected if k not in found]
    unexpected = [k for k in found if k not in expected]
    wrong_shape = [
        f"{k}: checkpoint {tuple(getattr(found[k], 'shape', ()))}, model {tuple(v.shape)}"
        for k, v in expected.items()
        if k in found and tuple(getattr(found[k], "shape", ())) != tuple(v.shape)
    ]
    return missing, unexpected, wrong_shape
