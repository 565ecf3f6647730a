"""What SQM-LR's defaults and solvers are, in words: one definition, quoted by the estimator's documentation and
by ``sqm logreg --help``.  Standard library only, so that ``sqm --help`` reads them without importing
scikit-learn or SciPy (tests/test_fast_start.py)."""

SOLVER_HELP = ("moments (default): one SQM release of the second moments of [features, intercept constant, label], "
               "then the model fitted from them at the server (no schedule, no weight bound in the sensitivity); "
               "sgd: the SQM paper's protocol, one Taylor-gradient release per Poisson batch (the schedule options "
               "apply to it)")

SCHEDULE_HELP = ("chosen from the record count n: q = max(64, sqrt n) / n (a batch of max(64, sqrt n) records), "
                 "the paper's epochs for epsilon (2, 5, 8, 10, 10 at 0.5, 1, 2, 4, 8), learning rate 2, "
                 "||w|| <= 8")
