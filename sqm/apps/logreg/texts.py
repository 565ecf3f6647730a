"""What SQM-LR's defaults and solvers are, in words: one definition, quoted by the estimator's documentation and
by ``sqm logreg --help``.  Standard library only, so that ``sqm --help`` reads them without importing
scikit-learn or SciPy (tests/test_fast_start.py)."""

# solver="auto" (sqm.apps.logreg.estimator.auto_solver): one full-batch sgd round of this schedule while
# n epsilon / max(d, AUTO_MIN_COLUMNS) is below AUTO_THRESHOLD, else the moments release (declared here so that the
# help quotes them)
AUTO_ROUND = {"q": 1.0, "epochs": 1, "learning_rate": 1.0, "weight_bound": 0.1}
AUTO_THRESHOLD = 5.0
AUTO_MIN_COLUMNS = 30

SOLVER_HELP = (f"auto (default): moments, or one full-batch sgd round (q {AUTO_ROUND['q']:g}, "
               f"{AUTO_ROUND['epochs']} epoch, learning rate {AUTO_ROUND['learning_rate']:g}, ||w|| <= "
               f"{AUTO_ROUND['weight_bound']:g}) while n epsilon / max(d, {AUTO_MIN_COLUMNS}) (records, epsilon, "
               f"feature columns: public) is "
               f"below {AUTO_THRESHOLD:g}; always moments with robust noise or verified inputs; the output says "
               "which ran and why; "
               "moments: one SQM release of the second moments of [features, intercept constant, label], "
               "then the model fitted from them at the server (no schedule, no weight bound in the sensitivity); "
               "sgd: the SQM paper's protocol, one Taylor-gradient release per Poisson batch (the schedule options "
               "apply to it)")

SCHEDULE_HELP = ("chosen from the record count n: q = max(64, sqrt n) / n (a batch of max(64, sqrt n) records), "
                 "the paper's epochs for epsilon (2, 5, 8, 10, 10 at 0.5, 1, 2, 4, 8), learning rate 2, "
                 "||w|| <= 8")
