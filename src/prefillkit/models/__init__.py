"""Model architecture shapes: pure data shared by the buffer estimator and the cost model.

- :mod:`~prefillkit.models.architecture`: :class:`ModelSpec` (the shapes, KV bytes per
  token) and the token-local GEMMs a prompt token runs (:func:`token_local_gemms`);
- :mod:`~prefillkit.models.model_presets`: the model presets (:data:`MODELS`,
  :func:`get_model`) and their Hugging Face ids (:func:`preset_for_model_id`);
- :mod:`~prefillkit.models.hf_config`: a :class:`ModelSpec` from a Hugging Face
  ``config.json`` (:func:`model_from_hf_config`).

Nothing here knows about GPUs or time.
"""

from __future__ import annotations

from prefillkit.models.architecture import Gemm, ModelSpec, token_local_gemms
from prefillkit.models.hf_config import ModelConfigError, model_from_hf_config
from prefillkit.models.model_presets import HF_MODEL_IDS, MODELS, get_model, preset_for_model_id

__all__ = [
    "HF_MODEL_IDS",
    "MODELS",
    "Gemm",
    "ModelConfigError",
    "ModelSpec",
    "get_model",
    "model_from_hf_config",
    "preset_for_model_id",
    "token_local_gemms",
]
