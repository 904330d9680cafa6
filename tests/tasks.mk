# Task, delivery and jump-safety tests.
