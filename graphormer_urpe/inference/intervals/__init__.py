r"""How sure a prediction is: split-conformal intervals for regression and temperature-scaled
probabilities for binary tasks, fitted on molecules the model did not train on
(:mod:`.calibration`: the calibrator, fitting it, its report and its file beside the
checkpoint, and whether an interval asked for can be given).

Calibrating a checkpoint on a CSV runs the prediction engine, which sits above this package:
:mod:`graphormer_urpe.inference.calibrate_csv`.
"""

from ...utils.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".calibration": [
            "Calibration",
            "calibration_report",
            "check_interval_request",
            "fit_calibration",
            "load_calibration",
        ],
    },
)
