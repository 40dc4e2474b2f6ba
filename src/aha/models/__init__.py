"""Model loading: the embedded SmolLM2-135M, local Hugging Face folders, a tiny test model."""

from aha.models.loading import EMBEDDED, LoadedModel, ModelNotFound, load

__all__ = ["EMBEDDED", "LoadedModel", "load", "ModelNotFound"]
