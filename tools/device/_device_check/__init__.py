"""The parts of ``tools/device/device_check.py``: the report, the runner, data preparation and
one module per section (environment, correctness, speed and compiled, fidelity)."""
