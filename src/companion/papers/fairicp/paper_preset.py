"""The paper's real datasets, read from ``data_path`` (never downloaded), and the FairICP pipeline on them.

File schemas (as the official ``get_dataset.py`` reads them; re-written here):
- Communities & Crimes: ``communities.data`` (UCI, comma-separated, ``?`` = missing) and
  ``communities.names`` (``@attribute NAME TYPE`` lines). Y = ViolentCrimesPerPop (regression),
  A = racepctblack, racePctAsian, racePctHisp; every column standardised, missing set to 0.
- COMPAS: ``compas.csv`` (the official repository's pre-processed file: ``two_year_recid``, ``race``,
  ``sex``, ``age``, other numeric columns, optionally an unnamed index). Y = two_year_recid, A = race, sex.
- Adult: ``adult.data`` and ``adult.test`` (UCI, 15 columns, test file with one header line).
  Y = income > 50K, A = gender, race (white or not).
- ACS Income (California): ``ca_features.csv`` and ``ca_labels.csv`` (folktables export, index column).
  Y = income label, A = SEX == 2, RAC1P == 2, AGEP.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from companion import params as cparams
from companion import runtime
from companion.papers.fairicp import adversarial as adv
from companion.papers.fairicp import densities, fairness, kpc, sampler

ADULT_COLUMNS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
                 "relationship", "race", "gender", "capital-gain", "capital-loss", "hours-per-week",
                 "native-country", "income"]
ACS_CATEGORICAL = ["COW", "SCHL", "MAR", "OCCP", "POBP", "RELP", "SEX", "RAC1P"]


@dataclass(frozen=True)
class Dataset:
    """Features x, attributes a (binary or continuous columns), response y and the task."""

    name: str
    x: np.ndarray
    a: np.ndarray
    y: np.ndarray
    task: str
    binary_a: tuple[int, ...]


def standardise(df: pd.DataFrame) -> pd.DataFrame:
    """Every column to mean 0, sd 1 (constant columns to 0)."""
    sd = df.std().replace(0, 1.0)
    return (df - df.mean()) / sd


def load_crimes(root: Path) -> Dataset:
    """Communities & Crimes, three racial-composition attributes, regression."""
    names = [line.split()[1] for line in (root / "communities.names").read_text().splitlines()
             if line.lower().startswith("@attribute")]
    df = pd.read_csv(root / "communities.data", names=names, na_values=["?"])
    df = df.drop(columns=["state", "county", "community", "fold", "communityname"], errors="ignore")
    df = standardise(df.apply(pd.to_numeric, errors="coerce").fillna(0.0)).fillna(0.0)
    attrs = ["racepctblack", "racePctAsian", "racePctHisp"]
    y = df.pop("ViolentCrimesPerPop").to_numpy(float)
    a = df[attrs].to_numpy(float)
    return Dataset("crimes", df.drop(columns=attrs).to_numpy(float), a, y, "regression", ())


def load_compas(root: Path) -> Dataset:
    """COMPAS (pre-processed), attributes race and sex, binary recidivism."""
    df = pd.read_csv(root / "compas.csv")
    df = df.drop(columns=[c for c in df.columns if c.startswith("Unnamed")])
    df["age"] = np.log(df["age"] - df["age"].min() + 1)
    df["age"] = (df["age"] - df["age"].mean()) / df["age"].std()
    y = df.pop("two_year_recid").to_numpy(int)
    a = df[["race", "sex"]].to_numpy(float)
    return Dataset("compas", df.drop(columns=["race", "sex"]).to_numpy(float), a, y, "classification", (0, 1))


def load_adult(root: Path) -> Dataset:
    """Adult (train + test files), attributes gender and white/non-white, income > 50K."""
    train = pd.read_csv(root / "adult.data", names=ADULT_COLUMNS, skipinitialspace=True)
    test = pd.read_csv(root / "adult.test", names=ADULT_COLUMNS, skipinitialspace=True, skiprows=1)
    df = pd.concat([train, test], ignore_index=True)
    df = df[(df.workclass != "?") & (df.occupation != "?") & (df["native-country"] != "?")]
    y = df.pop("income").astype(str).str.strip().str.rstrip(".").eq(">50K").to_numpy(int)
    gender = (df.gender.astype(str).str.strip() == "Male").astype(float)
    race = (df.race.astype(str).str.strip() == "White").astype(float)
    x = df.drop(columns=["gender", "race"])
    for col in x.columns:
        if not pd.api.types.is_numeric_dtype(x[col]):
            x[col] = np.unique(x[col].astype(str), return_inverse=True)[1]
    a = np.column_stack([gender, race])
    return Dataset("adult", standardise(x.astype(float)).to_numpy(float), a, y, "classification", (0, 1))


def load_acs_income(root: Path) -> Dataset:
    """ACS Income (CA), attributes gender, race (Black alone) and age, binary income label."""
    df = pd.read_csv(root / "ca_features.csv", index_col=0)
    labels = pd.read_csv(root / "ca_labels.csv", index_col=0)
    df["income"] = labels.iloc[:, 0].astype(float).to_numpy()
    df = df.dropna()
    gender = (df.pop("SEX") == 2).astype(float).to_numpy()
    race = (df.pop("RAC1P") == 2).astype(float).to_numpy()
    y = df.pop("income").to_numpy(int)
    for col in ACS_CATEGORICAL:
        if col in df:
            df[col] = np.unique(df[col], return_inverse=True)[1]
    x = standardise(df.astype(float))
    age = x.pop("AGEP").to_numpy(float)
    return Dataset("acs_income", x.to_numpy(float), np.column_stack([gender, race, age]), y,
                   "classification", (0, 1))


LOADERS = {"crimes": load_crimes, "compas": load_compas, "adult": load_adult, "acs_income": load_acs_income}


def load(name: str, root: Path) -> Dataset:
    """One dataset by name from the folder ``root``."""
    return LOADERS[name](root)


def run_dataset(ds: Dataset, p: Any, seed: int) -> list[dict[str, Any]]:
    """Unconstrained and FairICP (every positive lambda) on a 60/40 split of at most real_max_n rows."""
    rng, gen = runtime.generators(seed)
    idx = rng.permutation(len(ds.y))[: p.real_max_n]
    cut = int(0.6 * len(idx))
    tr, te = idx[:cut], idx[cut:]
    classification = ds.task == "classification"
    if classification:
        dens = densities.SoftmaxYgivenA(ds.y[tr], ds.a[tr], gen, epochs=5 if p.smoke else 200)
    else:
        dens = densities.GaussLinearYgivenA.fit(ds.y[tr], ds.a[tr])
    L_tr = dens.loglik_matrix(ds.y[tr], ds.a[tr])
    dummies = sampler.icp_dummies(L_tr, ds.a[tr], p.epochs, p.mcmc_sweeps, rng)
    L_te = dens.loglik_matrix(ds.y[te], ds.a[te])
    copies = sampler.icp_dummies(L_te, ds.a[te], p.n_test_perms, p.mcmc_sweeps, rng)
    yt = ds.y[te]
    test = kpc.ICPTest.build(yt, ds.a[te], copies, rng, p.kpc_knn)
    rows = []
    for lam in p.lambdas:
        cfg = adv.TrainConfig(lam=lam, epochs=p.epochs, batch_size=max(p.batch_size, 64), lr_pred=p.lr_pred,
                              lr_dis=p.lr_dis, dis_hidden=p.dis_hidden, predictor="mlp", task=ds.task)
        fitted = adv.fit(ds.x[tr], ds.y[tr], ds.a[tr], lambda e: dummies[e], cfg, gen)
        out = fitted.predict(ds.x[te])
        rho, pval = test.run(out)
        row = {"dataset": ds.name, "seed": seed, "lam": lam, "n_train": len(tr), "kpc": rho, "pval": pval}
        if classification:
            hard = out.argmax(1)
            row["loss"] = float(np.mean(hard != yt))
            if ds.binary_a and out.shape[1] == 2:
                row["deo"] = fairness.deo(hard, yt, fairness.joint_groups(ds.a[te][:, list(ds.binary_a)]))
        else:
            row["loss"] = float(np.mean((out - yt) ** 2))
        rows.append(row)
    return rows


def run_real(p: Any) -> pd.DataFrame:
    """Every dataset in ``p.datasets`` over the seeds; one row per (dataset, seed, lambda)."""
    root = cparams.resolve_path(p.data_path)
    rows: list[dict[str, Any]] = []
    for name in p.datasets:
        ds = load(name, root)
        for seed in p.seed_list():
            rows += run_dataset(ds, p, seed)
    return pd.DataFrame(rows)
