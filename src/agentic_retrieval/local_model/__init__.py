"""The bundled embedding model (all-MiniLM-L6-v2) run through OpenVINO, without torch.

``files`` finds nothing itself: it names the model's package, checks and reads its files and
says what a damaged one needs; ``bert`` builds the transformer as an OpenVINO graph straight
from ``model.safetensors``; ``encoder`` keeps that graph in the library's cache directory,
compiles it and turns texts into normalised vectors. The public API is
:mod:`agentic_retrieval.embeddings` (``local_embeddings()``, ``LocalEmbeddings``), which
re-exports what callers import from here.
"""
