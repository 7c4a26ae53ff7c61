# Write kpc_R_reference.json: the R package KPC's KPCgraph on fixed inputs, the reference of
# test_kpc_agrees_with_the_R_package in tests/test_fairicp.py.
#
#   Rscript tests/data/make_kpc_reference.R /path/to/KPC/R/KPC.R tests/data/kpc_R_reference.json
#
# KPC.R is the package's own source (CRAN KPC 0.1.2, e.g. the cran/KPC mirror on GitHub), sourced rather
# than installed: the package imports mlpack for its minimum-spanning-tree graph, which the K-NN estimator
# the paper uses never calls. It needs kernlab, RANN, data.table and proxy. Inputs are drawn here and
# stored beside the outputs (17 significant digits), so the test does not depend on R's random streams;
# they are continuous, so no nearest-neighbour ties call R's random tie-breaking.

args <- commandArgs(trailingOnly = TRUE)
if (length(args) != 2) stop("usage: Rscript make_kpc_reference.R path/to/KPC.R out.json")
library(kernlab)
source(args[1])

set.seed(20251203)
n <- 150
y <- rnorm(n)
a1 <- rnorm(n)
a2 <- matrix(rnorm(2 * n), n, 2)
noise <- rnorm(n)
cases <- list(
  list(name = "dependent-k1", yhat = y + 0.8 * a1 + 0.3 * noise, a = matrix(a1), knn = 1),
  list(name = "dependent-knn3", yhat = y + 0.8 * a1 + 0.3 * noise, a = matrix(a1), knn = 3),
  list(name = "independent-k2", yhat = y + 0.5 * noise, a = a2, knn = 1),
  list(name = "yhat-2d-k2", yhat = cbind(y + a2[, 1], 0.5 * y - a2[, 2] + 0.2 * noise), a = a2, knn = 2)
)
num <- function(v) paste0("[", paste(sprintf("%.17g", v), collapse = ", "), "]")
rows <- function(m) paste0("[", paste(apply(as.matrix(m), 1, num), collapse = ", "), "]")
out <- sapply(cases, function(cs) {
  rho <- KPCgraph(Y = as.matrix(cs$yhat), X = as.matrix(y), Z = cs$a, Knn = cs$knn)
  sprintf('{"name": "%s", "knn": %d, "yhat": %s, "a": %s, "kpc": %.17g}', cs$name, cs$knn, rows(cs$yhat),
          rows(cs$a), rho)
})
source_line <- sprintf('"%s with KPC 0.1.2 (KPCgraph, K-NN graph, default kernel)"', R.version.string)
writeLines(sprintf('{"source": %s, "y": %s, "cases": [%s]}', source_line, num(y), paste(out, collapse = ", ")),
           args[2])
