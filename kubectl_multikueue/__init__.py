"""`kubectl multikueue`: a kubectl plugin for a MultiKueue fleet (see __main__.py)."""
