"""Fuzzing harness of the decoders: structure-aware mutators, the checks every input must pass,
the CI tier (test_fuzz.py) and the long campaign (``./dev fuzz``)."""
