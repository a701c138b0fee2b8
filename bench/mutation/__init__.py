"""bench/mutation_score.py's parts: the mutants, the runs in copies of the tree, the score."""
