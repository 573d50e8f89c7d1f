"""Studies that run the engine over many prompts or settings and report on it: the benchmark suites (suite.py), the
grid sweep (sweep_grid.py) and the totals its tables share with bench (totals.py), a drafter's static trees
(static_study.py, measured by rank_acceptance.py, checked against real sessions by static_check.py), transformers'
own generate() as peers (peers.py), READER's self-repetition metric (self_repetition.py), and the progress stream of
a long study (progress_events.py). The engine (specviz.engine) knows none of them."""
