"""Offline analysis of finished runs: the results table and page (report), the significance of differences
between models (compare, stats). It reads run folders and never runs a model, so it stands above utils/ and
nothing below scripts/ imports it."""
