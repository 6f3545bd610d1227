"""Operator training: a lab with a hidden fault, a trainee who finds it, a graded answer."""
