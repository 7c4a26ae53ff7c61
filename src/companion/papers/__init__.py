"""One module per paper; each defines Params, run(params) and check(results)."""
