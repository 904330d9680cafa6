# bench: filled in by its issue
